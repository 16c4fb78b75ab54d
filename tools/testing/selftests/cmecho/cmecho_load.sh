#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# cmecho.ko loads, registers its configfs subsystem, unloads, and leaves it gone.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 7
dmesg_mark
ensure_configfs
rmmod cmecho 2>/dev/null

ktap_check "insmod cmecho.ko" insmod "$CMECHO_KO"
version_logged() {
	dmesg_since | grep -q "cmecho: version [0-9.]* loaded (RDMA CM probe ok)"
}
ktap_check "version line logged at load" version_logged
ktap_check "configfs directory present" test -d $CFS
ver=$(cat $CFS/version 2>/dev/null)
ktap_print_msg "configfs version: $ver"
ktap_check "configfs version readable" test -n "$ver"
ktap_check "rmmod cmecho" rmmod cmecho
ktap_check "configfs directory gone after unload" test ! -e $CFS
ktap_check "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
