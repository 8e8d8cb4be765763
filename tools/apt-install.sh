# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Sourced by demo.sh and test.sh: apt_install_missing PACKAGE... installs the Debian
# packages that are not installed yet (as root), without letting their maintainer
# scripts start system services (redis, nginx, memcached): our scripts start their own
# instances on free ports. Returns 1 when packages are missing and cannot be installed.
apt_install_missing() {
	local missing=() p created_policy=0
	command -v dpkg-query >/dev/null || { echo "not Debian: not installing packages"; return 0; }
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "missing packages: ${missing[*]} (run as root to install them)" >&2
		return 1
	fi
	echo "installing: ${missing[*]}"
	# policy-rc.d exit 101 = "action forbidden"
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		created_policy=1
	fi
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
	p=$?
	[ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
	return "$p"
}
