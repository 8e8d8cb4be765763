/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Leveled logging; silent by default. SMC_LOG_LEVEL / SMC_DEBUG, SMC_LOG_FILE (%p = pid). */
#ifndef SMC_LOG_H
#define SMC_LOG_H

enum smc_log_level { SMC_LOG_OFF = 0, SMC_LOG_ERR, SMC_LOG_WARN, SMC_LOG_INFO, SMC_LOG_DEBUG };

extern int smc_log_level;

/* Opens SMC_LOG_FILE if set; call after config_load(). */
void log_init(void);
void smc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define smc_log_at(lvl, ...) \
	do { if (__builtin_expect(smc_log_level >= (lvl), 0)) smc_log((lvl), __VA_ARGS__); } while (0)
#define log_err(...)   smc_log_at(SMC_LOG_ERR, __VA_ARGS__)
#define log_warn(...)  smc_log_at(SMC_LOG_WARN, __VA_ARGS__)
#define log_info(...)  smc_log_at(SMC_LOG_INFO, __VA_ARGS__)
#define log_debug(...) smc_log_at(SMC_LOG_DEBUG, __VA_ARGS__)

/* Expands %p in a path template to the pid; returns a malloc'd string or NULL. */
char *log_expand_path(const char *tmpl);

#endif
