/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The base's own start (base_init.h). */
#include "core/base/base_init.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/stats.h"

static pthread_once_t base_once = PTHREAD_ONCE_INIT;

static void base_run(void)
{
	real_init();
	(void)clock_resolve(); /* before any deadline, and outside any signal handler */
	config_load(NULL);
	log_init();
	atexit(stats_at_exit);
}

void base_init(void)
{
	pthread_once(&base_once, base_run);
}
