#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# cmecho.ko loads, registers its configfs subsystem, unloads, and leaves it gone.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 7
dmesg_mark
ensure_configfs
rmmod cmecho 2>/dev/null

ktap_test_result "insmod cmecho.ko" insmod "$CMECHO_KO"
ktap_test_result "version line logged at load" sh -c 'dmesg | tail -n 50 | grep -q "cmecho: version [0-9.]* loaded (RDMA CM probe ok)"'
ktap_test_result "configfs directory present" test -d $CFS
ver=$(cat $CFS/version 2>/dev/null)
ktap_print_msg "configfs version: $ver"
ktap_test_result "configfs version readable" test -n "$ver"
ktap_test_result "rmmod cmecho" rmmod cmecho
ktap_test_result "configfs directory gone after unload" test ! -e $CFS
ktap_test_result "no BUG/WARNING/Oops in dmesg" check_dmesg_clean
ktap_finished
