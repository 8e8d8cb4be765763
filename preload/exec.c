/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The exec family, posix_spawn, system and popen: before a new program gets our
 * descriptors, the core carries the upgraded connections it inherits into it when it
 * loads this library (core/sock/exec_carry.c: the exec then passes the core's
 * environment), or takes them back to plain TCP (core/sock/downgrade.c), and withdraws
 * the listeners from the SMC TCP option (core/sock/exec.c); an exec or a spawn that
 * fails gives them back. libc's own exec variants call execve internally, where no
 * wrapper sees them: each is wrapped, the execl* forms by building their argument
 * vector.
 */
#include "preload/wrap.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

/* An exec that returns failed: the image goes on (core/sock/exec.c). */
static int exec_returned(int r)
{
	KEEP_ERRNO(smc_sock_exec_failed());
	return r;
}

/* The environment the exec passes: the caller's, or the core's copy naming the
 * connections it carries into the new image. */
#define BEFORE_EXEC(env, how, path, envp) KEEP_ERRNO(env = smc_sock_before_exec(how, path, envp))

SMC_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	char *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES, path, envp);
	return exec_returned(CALL_REAL(execve, path, argv, env));
}

SMC_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			int flags)
{
	char buf[64], *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES, exec_image_at(dirfd, path, flags, buf, sizeof(buf)),
		    envp);
	return exec_returned(CALL_REAL(execveat, dirfd, path, argv, env, flags));
}

SMC_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	char buf[64], *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES, exec_image_at(fd, "", AT_EMPTY_PATH, buf, sizeof(buf)),
		    envp);
	return exec_returned(CALL_REAL(fexecve, fd, argv, env));
}

SMC_EXPORT int execv(const char *path, char *const argv[])
{
	char *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES, path, environ);
	return exec_returned(CALL_REAL(execve, path, argv, env));
}

SMC_EXPORT int execvp(const char *file, char *const argv[])
{
	char *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES | SMC_EXEC_SEARCH, file, environ);
	return exec_returned(CALL_REAL(execvpe, file, argv, env));
}

SMC_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	char *const *env;

	BEFORE_EXEC(env, SMC_EXEC_REPLACES | SMC_EXEC_SEARCH, file, envp);
	return exec_returned(CALL_REAL(execvpe, file, argv, env));
}

/* The arguments after arg up to the terminating NULL; for execle the environment
 * pointer that follows it. The vector lives on the caller's stack, as in glibc. */
#define EXECL_ARGV(arg, argv, envp_out)                                        \
	do {                                                                   \
		va_list ap_;                                                   \
		size_t n_ = 1;                                                 \
		va_start(ap_, arg);                                            \
		while (va_arg(ap_, const char *))                              \
			n_++;                                                  \
		va_end(ap_);                                                   \
		argv = __builtin_alloca((n_ + 1) * sizeof(char *));           \
		argv[0] = (char *)(arg);                                       \
		va_start(ap_, arg);                                            \
		for (size_t i_ = 1; i_ <= n_; i_++)                            \
			argv[i_] = va_arg(ap_, char *);                        \
		envp_out = va_arg(ap_, char **);                               \
		va_end(ap_);                                                   \
	} while (0)

SMC_EXPORT int execl(const char *path, const char *arg, ...)
{
	char **argv, **unused;

	char *const *env;

	EXECL_ARGV(arg, argv, unused);
	(void)unused;
	BEFORE_EXEC(env, SMC_EXEC_REPLACES, path, environ);
	return exec_returned(CALL_REAL(execve, path, argv, env));
}

SMC_EXPORT int execlp(const char *file, const char *arg, ...)
{
	char **argv, **unused;

	char *const *env;

	EXECL_ARGV(arg, argv, unused);
	(void)unused;
	BEFORE_EXEC(env, SMC_EXEC_REPLACES | SMC_EXEC_SEARCH, file, environ);
	return exec_returned(CALL_REAL(execvpe, file, argv, env));
}

SMC_EXPORT int execle(const char *path, const char *arg, ...)
{
	char **argv, **envp;

	char *const *env;

	EXECL_ARGV(arg, argv, envp);
	BEFORE_EXEC(env, SMC_EXEC_REPLACES, path, envp);
	return exec_returned(CALL_REAL(execve, path, argv, env));
}

SMC_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	int r;

	KEEP_ERRNO(smc_sock_before_exec(0, path, envp));
	r = REAL(posix_spawn) ? REAL(posix_spawn)(pid, path, fa, attr, argv, envp) : ENOSYS;
	if (r != 0) /* no child: the listeners answer again */
		KEEP_ERRNO(smc_sock_exec_failed());
	return r;
}

SMC_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	int r;

	KEEP_ERRNO(smc_sock_before_exec(SMC_EXEC_SEARCH, file, envp));
	r = REAL(posix_spawnp) ? REAL(posix_spawnp)(pid, file, fa, attr, argv, envp) : ENOSYS;
	if (r != 0)
		KEEP_ERRNO(smc_sock_exec_failed());
	return r;
}

SMC_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
	KEEP_ERRNO(smc_sock_before_spawn_dup(fd));
	return REAL(posix_spawn_file_actions_adddup2)
		       ? REAL(posix_spawn_file_actions_adddup2)(fa, fd, newfd) : ENOSYS;
}

SMC_EXPORT int system(const char *cmd)
{
	if (cmd)
		KEEP_ERRNO(smc_sock_before_exec(0, "/bin/sh", environ));
	return CALL_REAL(system, cmd);
}

SMC_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	KEEP_ERRNO(smc_sock_before_exec(0, "/bin/sh", environ));
	if (!REAL(popen)) {
		errno = ENOSYS;
		return NULL;
	}
	return REAL(popen)(cmd, mode);
}
