#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# twovm-init.sh: process 1 of each VM started by run-twovm.sh, on the overlay of the
# host's root, after the initrd (vm-image.sh) mounted the file systems. Puts 10.99.0.ID/24
# and a Soft-RoCE device rxe0 on eth0 (the NIC on the network the two VMs share), runs the
# command from the exchange directory /run/smcvm (shared by both VMs and the host) with
# SMC_VM_ID, SMC_VM_ADDR and SMC_VM_PEER_ADDR, writes its exit status to rc.ID there and
# powers the VM off. Never run it on a host.

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The power-off runs asynchronously and takes the 9p root away: wait with a builtin.
power_off() {
	sync
	echo o >/proc/sysrq-trigger
	read -r -t 30 </dev/console
}

[ "$$" = 1 ] || { echo "twovm-init.sh runs as the VM's process 1 only"; exit 99; }

id=$(sed -n 's/.*[[:space:]]smcvm\.id=\([12]\).*/\1/p' /proc/cmdline)
[ -n "$id" ] || { echo "smc-vm: no smcvm.id= on the kernel command line"; power_off; }
hostname "vm$id"
# run-twovm.sh boots the pair again when a VM does not get this far
: >"/run/smcvm/up.$id"
# devtmpfs has no /dev/fd: bash's process substitution <(...) needs it
ln -sf /proc/self/fd /dev/fd
# A FIFO nobody writes: `read -t` on it is a sleep without starting a process (each
# program start costs 0.1-0.5 s under TCG); vm-lib.sh's twovm_* waits use it.
mkfifo -m 0666 /run/smcvm-nap
ip addr add "10.99.0.$id/24" dev eth0 && ip link set eth0 up ||
	echo "smc-vm: cannot configure eth0"
rdma link add rxe0 type rxe netdev eth0 || echo "smc-vm: cannot add the Soft-RoCE device rxe0"

(
	# shellcheck disable=SC1091 # written by run-twovm.sh
	. /run/smcvm/env
	export SMC_VM_ID=$id SMC_VM_ADDR=10.99.0.$id SMC_VM_PEER_ADDR=10.99.0.$((3 - id))
	exec setsid bash /run/smcvm/cmd
) </dev/null >/dev/console 2>&1
echo "$?" >"/run/smcvm/rc.$id.tmp" && mv "/run/smcvm/rc.$id.tmp" "/run/smcvm/rc.$id"
umount /run/smcvm
power_off
