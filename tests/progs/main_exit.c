/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * main_exit: a program whose main thread ends before the process does.
 *
 *   main_exit pthread-exit PORT   main() starts a thread and calls pthread_exit(); the
 *                                 thread echoes 64 KiB through 127.0.0.1:PORT and
 *                                 returns: glibc then ends the process, exit status 0
 *   main_exit raw-exit PORT       the same as pthread-exit, but main() ends with the raw
 *                                 exit system call (status 7), which glibc never counts:
 *                                 the process ends with its last thread's status, 0,
 *                                 and no atexit handler runs
 *   main_exit kill-thread PORT    main() echoes 64 KiB, loads a seccomp filter whose
 *                                 action for getppid is SECCOMP_RET_KILL_THREAD, and
 *                                 calls getppid: its only thread dies, and with it the
 *                                 process, by SIGSYS
 * The echo's check is printed ("echo intact"), and an atexit handler prints "atexit ran";
 * the process's end is the test's.
 */
#include <arpa/inet.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define OUR_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OUR_ARCH AUDIT_ARCH_AARCH64
#else
#error "main_exit: x86-64 or aarch64 only"
#endif

#define BYTES 65536

static int port;

static void *echo(void *arg)
{
	static unsigned char out[BYTES], in[BYTES];
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	(void)arg;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (size_t i = 0; i < BYTES; i++)
		out[i] = (unsigned char)(i * 13 + (i >> 9));
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, out, BYTES) != BYTES || shutdown(fd, SHUT_WR) < 0) {
		perror("main_exit: echo");
		return NULL;
	}
	for (ssize_t n; got < BYTES && (n = read(fd, in + got, BYTES - got)) > 0;)
		got += (size_t)n;
	close(fd);
	printf("echo %s\n", got == BYTES && memcmp(in, out, BYTES) == 0 ? "intact" : "WRONG");
	fflush(stdout);
	return NULL;
}

static void kill_thread_on_getppid(void)
{
	struct sock_filter insns[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OUR_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getppid, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(insns) / sizeof(insns[0]), insns };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
		perror("main_exit: loading the filter");
		exit(1);
	}
	syscall(SYS_getppid);
}

static void at_exit(void)
{
	printf("atexit ran\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc != 3) {
		fprintf(stderr, "usage: main_exit pthread-exit|raw-exit|kill-thread PORT\n");
		return 2;
	}
	port = atoi(argv[2]);
	if (strcmp(argv[1], "kill-thread") == 0) {
		echo(NULL);
		kill_thread_on_getppid();
		return 3; /* not reached: the thread died */
	}
	atexit(at_exit);
	if (pthread_create(&t, NULL, echo, NULL) != 0)
		return 1;
	if (strcmp(argv[1], "raw-exit") == 0)
		syscall(SYS_exit, 7);
	pthread_exit(NULL);
}
