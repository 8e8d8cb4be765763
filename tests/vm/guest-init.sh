#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# guest-init.sh: process 1 of the VM started by run-vm.sh, on the overlay of the host's
# root, after the initrd mounted the file systems (see run-vm.sh). Adds the Soft-RoCE
# device, runs the command from the exchange directory /run/smcvm, writes its exit status
# there and powers the VM off. Never run it on a host.

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The power-off runs asynchronously and takes the 9p root away: wait with a builtin.
power_off() {
	sync
	echo o >/proc/sysrq-trigger
	read -r -t 30 </dev/console
}

[ "$$" = 1 ] || { echo "guest-init.sh runs as the VM's process 1 only"; exit 99; }

rdma link add rxelo type rxe netdev lo || echo "smc-vm: cannot add the Soft-RoCE device rxelo"

# The command gets a session of its own (setsid), so it may make process groups.
(
	# shellcheck disable=SC1091 # written by run-vm.sh
	. /run/smcvm/env
	exec setsid bash /run/smcvm/cmd
) </dev/null >/dev/console 2>&1
echo "$?" >/run/smcvm/rc
umount /run/smcvm
power_off
