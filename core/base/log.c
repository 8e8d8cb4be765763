/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Leveled logging. Silent unless SMC_LOG_LEVEL or SMC_DEBUG asks for it.
 *
 * Each message is formatted into a stack buffer and written with ONE write() through
 * the real libc function (write is interposed by the library), so lines from several
 * threads or processes sharing the log file never interleave, and nothing allocates:
 * logging is safe from any wrapper, even while malloc is in a bad state.
 * errno is preserved so a wrapper may log between a failing call and its return.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/config.h"
#include "core/base/fd_budget.h"
#include "core/base/fdpark.h"
#include "core/base/fsize.h"
#include "core/base/log.h"
#include "core/base/real.h"
#include "core/base/sandbox.h"

int smc_log_level = SMC_LOG_OFF;

/* Where lines go: stderr until log_init() opens SMC_LOG_FILE. */
static int log_fd = STDERR_FILENO;

/* Longest line written; longer messages are cut and keep their newline. */
#define LOG_LINE_MAX 1024

static const char *level_name(int level)
{
	switch (level) {
	case SMC_LOG_ERR: return "ERROR";
	case SMC_LOG_WARN: return "WARN";
	case SMC_LOG_INFO: return "INFO";
	case SMC_LOG_DEBUG: return "DEBUG";
	default: return "LOG";
	}
}

static void log_write_all(const char *buf, size_t len)
{
	/* a line past RLIMIT_FSIZE would raise SIGXFSZ (fsize.h): OpenSSH's privsep
	 * child, limit 0, was killed by a debug line */
	if (!fsize_allows_append(log_fd, len))
		return;
	while (len > 0) {
		ssize_t n = REAL(write)(log_fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

void smc_log(int level, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	int saved_errno = errno;
	va_list ap;
	int n, m;

	/* under a seccomp sandbox a write to a log file may exceed the RLIMIT_FSIZE it set
	 * (0 for OpenSSH's): SIGXFSZ would kill the process (sandbox.h) */
	if (sandbox_active())
		return;
	n = snprintf(line, sizeof(line), "smc-preload[%ld] %s: ", (long)getpid(),
		     level_name(level));
	if (n < 0 || (size_t)n >= sizeof(line) - 1)
		n = 0;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2; /* truncated: keep room for the newline */
	if (n == 0 || line[n - 1] != '\n')
		line[n++] = '\n';
	log_write_all(line, (size_t)n);
	errno = saved_errno;
}

char *log_expand_path(const char *tmpl)
{
	char pid[24];
	size_t len = 0, pidlen;
	char *out, *o;

	if (tmpl == NULL)
		return NULL;
	pidlen = (size_t)snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	/* Upper bound: every "%p" (two bytes) becomes pidlen bytes. */
	for (const char *s = tmpl; *s != '\0'; s++)
		len += (s[0] == '%' && s[1] == 'p') ? pidlen : 1;
	out = malloc(len + 1);
	if (out == NULL)
		return NULL;
	o = out;
	for (const char *s = tmpl; *s != '\0'; s++) {
		if (s[0] == '%' && s[1] == 'p') {
			memcpy(o, pid, pidlen);
			o += pidlen;
			s++;
		} else if (s[0] == '%' && s[1] == '%') {
			*o++ = '%';
			s++;
		} else {
			*o++ = *s; /* any other '%' stays as written */
		}
	}
	*o = '\0';
	return out;
}

void log_init(void)
{
	char *path;
	int fd;

	smc_log_level = smc_cfg.log_level;
	if (log_fd != STDERR_FILENO) {
		fd_own_close(log_fd); /* log_init() called again: reopen */
		log_fd = STDERR_FILENO;
		fd_budget_give(1);
	}
	if (smc_cfg.log_file == NULL)
		return;
	path = log_expand_path(smc_cfg.log_file);
	if (path == NULL) {
		smc_log(SMC_LOG_ERR, "cannot expand SMC_LOG_FILE (out of memory); logging to stderr");
		return;
	}
	/* Owner-only: logs may name peers and ports. */
	fd = REAL(open)(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		smc_log(SMC_LOG_ERR, "cannot open SMC_LOG_FILE %s: %s; logging to stderr", path,
			strerror(errno));
	else
		/* off the low numbers: a program that puts its own descriptors at fixed
		 * numbers (systemd-socket-activate's listener at 3) must find them free */
		log_fd = fd_park(fd);
	if (fd >= 0)
		fd_budget_take(1);
	free(path);
}
