/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The size of one core's L2 cache, which the default ring size must exceed (config.c:
 * a ring that fits in L2 keeps the lines the writer comes back to in the reader's cache).
 */
#ifndef SMC_CPU_CACHE_H
#define SMC_CPU_CACHE_H

/* Bytes of L2 of the CPU we run on: glibc's sysconf, else sysfs; 0 when unknown. */
long cpu_l2_bytes(void);

/* The level-2 data or unified cache under a sysfs cache directory such as
 * /sys/devices/system/cpu/cpu0/cache (index<N>/level, type, size); 0 when none. */
long cpu_l2_from_sysfs(const char *cache_dir);

/* A sysfs cache size ("1024K", "2M", "512"; a trailing newline is fine) in bytes,
 * or -1 when it is not one. */
long cpu_cache_parse_size(const char *text);

#endif
