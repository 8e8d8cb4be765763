#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The churn test (churn.sh) with every connection negotiated through the SMC TCP option
# (in band: smc_preload.sh --setup, under a map directory of its own, torn down at exit):
# the client proposes on the progress thread, the epoll server's nonblocking listener
# hands its connections out while they negotiate in the background. Root only.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
CHURN_PATH=tcpopt exec bash "$(dirname -- "$0")/churn.sh" "$@"
