# SPDX-License-Identifier: GPL-2.0
#
# cmecho entry points. The module itself is built by kbuild from ./Kbuild.
#
#   make            build cmecho.ko against KDIR (default: the cached test kernel)
#   make check      toolchain -> debug kernel -> modules -> selftests in a VM -> the
#                   honest count; `make check T=netns.sh` runs one program alone
#   make check-canary  the negative control: each debug detector must fire
#   make demo       show cmecho working in a VM (SCENE=two-hosts: in two VMs)
#   make bench      measure cmecho against perftest, rping and the theory, in a VM
#                   (`make bench ROUNDS=5`); results in results/bench/
#   make two-hosts  cmecho between two guests, the server's killed hard and booted
#                   again; results in results/two-hosts/
#   make setup      install the toolchain only
#   make kernel     build (or find in the cache) the test kernel only
#   make clean      remove build products from the source tree

ifneq ($(KERNELRELEASE),)
# Invoked by kbuild: ./Kbuild describes the objects.
include $(src)/Kbuild
else

.PHONY: all modules setup kernel check check-canary demo bench two-hosts clean

all modules:
	scripts/kmake modules

setup:
	scripts/setup-toolchain

kernel: setup
	scripts/build-kernel

check:
	scripts/check $(foreach t,$(T),-t $(t))

check-canary:
	scripts/check --canary

demo:
	scripts/demo $(SCENE)

bench:
	scripts/bench $(ROUNDS)

two-hosts:
	scripts/two-hosts

clean:
	-scripts/kmake clean 2>/dev/null
	rm -rf results
endif
