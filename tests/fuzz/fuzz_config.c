/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * libFuzzer harness: SMC_* values from the environment (core/base/config.c). The first byte
 * picks a variable of the table, the rest is its value: first through the table's
 * parser for the variable's type, whose result must lie in the variable's range, then
 * through config_load with the value in the environment, which must report it or take
 * it, never crash (config.h: "a bad value is reported ... and the default is kept").
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull(void)
{
	static FILE *f;

	if (!f) {
		f = fopen("/dev/null", "w");
		if (!f)
			abort();
		config_set_cpu_l2(1 << 20); /* not the CPU's: the same run every time */
		for (size_t i = 0; i < smc_cfg_nvars; i++) /* only the fuzzed value is set */
			unsetenv(smc_cfg_vars[i].name);
	}
	return f;
}

static void parse(const struct smc_cfg_var *var, const char *value)
{
	unsigned long long u;
	bool b;
	int r;

	switch (var->type) {
	case SMC_CFG_SIZE:
	case SMC_CFG_UINT:
		r = var->type == SMC_CFG_SIZE ? config_parse_size(value, var->min, var->max, &u)
					       : config_parse_uint(value, var->min, var->max, &u);
		if (r < -2 || r > 0 || (r == 0 && (u < var->min || u > var->max)))
			abort();
		break;
	case SMC_CFG_BOOL:
		r = config_parse_bool(value, &b);
		if (r < -2 || r > 0)
			abort();
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct smc_cfg_var *var;
	char *value;
	int bad;

	if (size < 1 || size > 256)
		return 0;
	var = &smc_cfg_vars[data[0] % smc_cfg_nvars];
	value = malloc(size);
	if (!value)
		abort();
	memcpy(value, data + 1, size - 1);
	value[size - 1] = '\0';

	parse(var, value);
	if (setenv(var->name, value, 1) != 0)
		abort();
	bad = config_load(devnull());
	unsetenv(var->name);
	if (bad < 0 || bad > 1)
		abort();
	if ((bad == 1) != (config_source(data[0] % smc_cfg_nvars) == SMC_CFG_INVALID))
		abort();
	free(value);
	return 0;
}
