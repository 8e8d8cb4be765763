/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * c2c: how far apart CPUs 0 and 1 are, as the round trip of one cache line between two
 * threads pinned to them (ns; c2c_probe.h says why it matters). bench/run runs it around
 * each CPU-per-GiB round; the sweep probes through msgsize -c, around every size.
 *
 *   c2c [MS]   prints the mean round trip in ns over MS milliseconds (default 100);
 *              0 when there are fewer than two CPUs to pin to.
 */
#include "c2c_probe.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	printf("%.0f\n", c2c_probe_ns(argc > 1 ? atoi(argv[1]) : 100));
	return 0;
}
