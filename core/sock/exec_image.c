/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Whether the program an exec starts will load this library. Its answer decides what
 * the exec does with our connections and listeners (exec.c, exec_carry.c): a yes hands
 * upgraded connections to the new image as they are, so a wrong yes would leave a
 * program reading a TCP socket while its peer writes into a ring nobody reads. Unknown
 * counts as no: the cost of a wrong no is plain TCP.
 *
 * ld.so loads a preload named in LD_PRELOAD when the program is dynamically linked
 * (it has a PT_INTERP header: a static binary, most Go programs among them, has no
 * loader) by our loader (musl's would fail on this library), is of our ELF class and
 * machine (another one is "ignored" with a message), and does not run in
 * secure-execution mode. A Go program built with cgo passes all that but does its
 * socket I/O with its own system calls: it counts as not loading the library (set-user-ID, set-group-ID, file
 * capabilities: a preload named by a path is ignored then). A script runs its "#!"
 * interpreter, which the kernel follows up to four levels deep.
 */
#include <elf.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "core/base/real.h"
#include "core/sock/sock.h"

#define SCRIPT_DEPTH 4 /* the kernel's limit on nested interpreters (BINPRM_MAX_RECURSION) */

/* The ELF header of the file at path, or of this library when path is NULL. */
static bool read_ehdr(const char *path, Elf64_Ehdr *eh, char *head, size_t headlen, int *fdp)
{
	int fd = REAL(open)(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = pread(fd, head, headlen, 0);
	if (n < (ssize_t)sizeof(*eh) && !(n >= 2 && head[0] == '#' && head[1] == '!')) {
		close(fd);
		return false;
	}
	if (n >= (ssize_t)sizeof(*eh))
		memcpy(eh, head, sizeof(*eh));
	else
		memset(eh, 0, sizeof(*eh));
	if ((size_t)n < headlen)
		head[n] = '\0';
	else
		head[headlen - 1] = '\0';
	*fdp = fd;
	return true;
}

/* The dynamic loader fd's program names (PT_INTERP), in out; false for a static one. */
static bool elf_interp(int fd, const Elf64_Ehdr *eh, char *out, size_t outlen)
{
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0 || eh->e_phnum > 512)
		return false;
#if defined(__x86_64__)
	if (eh->e_machine != EM_X86_64)
		return false;
#elif defined(__aarch64__)
	if (eh->e_machine != EM_AARCH64)
		return false;
#endif
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		Elf64_Phdr ph;

		if (pread(fd, &ph, sizeof(ph), (off_t)(eh->e_phoff + (uint64_t)i * sizeof(ph))) !=
		    (ssize_t)sizeof(ph))
			return false;
		if (ph.p_type != PT_INTERP)
			continue;
		if (ph.p_filesz == 0 || ph.p_filesz >= outlen ||
		    pread(fd, out, ph.p_filesz, (off_t)ph.p_offset) != (ssize_t)ph.p_filesz)
			return false;
		out[ph.p_filesz] = '\0';
		return true;
	}
	return false;
}

/* The loader this process runs under: a program with another one (musl's, another
 * architecture's) cannot load this library. Empty when unknown. */
static const char *our_interp(void)
{
	static char interp[PATH_MAX];
	static bool done;
	char head[256];
	Elf64_Ehdr eh;
	int fd;

	if (done)
		return interp;
	if (read_ehdr("/proc/self/exe", &eh, head, sizeof(head), &fd)) {
		if (!elf_interp(fd, &eh, interp, sizeof(interp)))
			interp[0] = '\0';
		close(fd);
	}
	done = true;
	return interp;
}

/* A note named "Go" in a PT_NOTE segment (the Go linker's build ID, kept by cgo's
 * external link too). */
static bool go_note(int fd, const Elf64_Ehdr *eh)
{
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		unsigned char buf[4096];
		Elf64_Phdr ph;
		size_t len, at = 0;

		if (pread(fd, &ph, sizeof(ph), (off_t)(eh->e_phoff + (uint64_t)i * sizeof(ph))) !=
		    (ssize_t)sizeof(ph))
			return false;
		if (ph.p_type != PT_NOTE)
			continue;
		len = ph.p_filesz < sizeof(buf) ? ph.p_filesz : sizeof(buf);
		if (pread(fd, buf, len, (off_t)ph.p_offset) != (ssize_t)len)
			continue;
		while (at + sizeof(Elf64_Nhdr) <= len) {
			Elf64_Nhdr nh;
			size_t name_at = at + sizeof(nh);

			memcpy(&nh, buf + at, sizeof(nh));
			if (nh.n_namesz == 3 && name_at + 3 <= len && memcmp(buf + name_at, "Go", 3) == 0)
				return true;
			at = name_at + ((nh.n_namesz + 3u) & ~3u) + ((nh.n_descsz + 3u) & ~3u);
		}
	}
	return false;
}

/* A section named .go.buildinfo or .note.go.buildid (when section headers are there). */
static bool go_section(int fd, const Elf64_Ehdr *eh)
{
	char *names;
	Elf64_Shdr strs;
	size_t len;
	bool found = false;

	if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 ||
	    eh->e_shnum > 4096 || eh->e_shstrndx >= eh->e_shnum ||
	    pread(fd, &strs, sizeof(strs), (off_t)(eh->e_shoff + (uint64_t)eh->e_shstrndx *
						     sizeof(strs))) != (ssize_t)sizeof(strs))
		return false;
	len = strs.sh_size < 65536 ? strs.sh_size : 65536;
	names = malloc(len + 1);
	if (!names)
		return false;
	if (pread(fd, names, len, (off_t)strs.sh_offset) != (ssize_t)len) {
		free(names);
		return false;
	}
	names[len] = '\0';
	for (unsigned i = 0; i < eh->e_shnum && !found; i++) {
		Elf64_Shdr sh;
		const char *name;

		if (pread(fd, &sh, sizeof(sh), (off_t)(eh->e_shoff + (uint64_t)i * sizeof(sh))) !=
		    (ssize_t)sizeof(sh))
			break;
		if (sh.sh_name >= len)
			continue;
		name = names + sh.sh_name;
		found = !strcmp(name, ".go.buildinfo") || !strcmp(name, ".note.go.buildid");
	}
	free(names);
	return found;
}

/* A dynamically linked ELF of our class and machine, run by our loader, and not a Go
 * program: one built with cgo loads the library, but its runtime reads and writes
 * sockets with its own system calls, past every wrapper. */
static bool elf_loads_preload(int fd, const Elf64_Ehdr *eh)
{
	char interp[PATH_MAX];
	const char *ours = our_interp();

	return ours[0] && elf_interp(fd, eh, interp, sizeof(interp)) && strcmp(interp, ours) == 0 &&
	       !go_note(fd, eh) && !go_section(fd, eh);
}

bool exec_image_is_go(const char *path)
{
	char head[256];
	Elf64_Ehdr eh;
	int fd;
	bool go;

	if (!read_ehdr(path, &eh, head, sizeof(head), &fd))
		return false;
	go = memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
	     eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum <= 512 &&
	     (go_note(fd, &eh) || go_section(fd, &eh));
	close(fd);
	return go;
}

/* Secure execution: ld.so then ignores a preload named by a path. The kernel asks for
 * it when the program is set-user-ID or set-group-ID, has file capabilities, or the
 * process's real and effective IDs differ. */
static bool runs_secure(const char *path)
{
	struct stat st;

	if (getuid() != geteuid() || getgid() != getegid())
		return true;
	if (stat(path, &st) < 0)
		return true;
	if (st.st_mode & (S_ISUID | S_ISGID))
		return true;
	return getxattr(path, "security.capability", NULL, 0) >= 0;
}

static bool image_loads_preload(const char *path, int depth)
{
	char head[256];
	Elf64_Ehdr eh;
	int fd;
	bool ok;

	if (depth > SCRIPT_DEPTH || access(path, X_OK) < 0 || !read_ehdr(path, &eh, head, sizeof(head), &fd))
		return false;
	if (head[0] == '#' && head[1] == '!') {
		char *p = head + 2, *end;

		close(fd);
		while (*p == ' ' || *p == '\t')
			p++;
		end = p + strcspn(p, " \t\n");
		*end = '\0';
		/* the interpreter runs, with the script as an argument: its image counts */
		return *p == '/' && image_loads_preload(p, depth + 1);
	}
	ok = elf_loads_preload(fd, &eh) && !runs_secure(path);
	close(fd);
	return ok;
}

/* execvp's search: the first executable regular file of that name in $PATH (the
 * caller's, as glibc takes it), "/bin:/usr/bin" without one. */
static bool search_path(const char *file, char *out, size_t outlen)
{
	const char *path = getenv("PATH");
	const char *p;

	if (!path)
		path = "/bin:/usr/bin";
	for (p = path;; p++) {
		const char *colon = strchr(p, ':');
		size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
		struct stat st;
		int n = dlen ? snprintf(out, outlen, "%.*s/%s", (int)dlen, p, file)
			     : snprintf(out, outlen, "%s", file);

		if (n > 0 && (size_t)n < outlen && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
		    access(out, X_OK) == 0)
			return true;
		if (!colon)
			return false;
		p = colon;
	}
}

/* LD_PRELOAD of envp names this library's file (entries split at spaces and colons, as
 * ld.so does). */
static bool env_preloads_us(char *const envp[])
{
	struct stat self, st;
	const char *v = NULL;
	char *list, *save = NULL;
	bool found = false;
	Dl_info info;

	/* this library's file (an exec is rare: looked up each time) */
	if (!envp || !dladdr((void *)env_preloads_us, &info) || !info.dli_fname ||
	    stat(info.dli_fname, &self) < 0)
		return false;
	for (char *const *e = envp; *e; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) == 0)
			v = *e + 11;
	if (!v || !(list = strdup(v)))
		return false;
	for (char *t = strtok_r(list, " :", &save); t && !found; t = strtok_r(NULL, " :", &save))
		found = stat(t, &st) == 0 && st.st_dev == self.st_dev && st.st_ino == self.st_ino;
	free(list);
	return found;
}

bool exec_image_runs_library(const char *path, bool search, char *const envp[])
{
	char found[PATH_MAX];

	if (!path || !*path || !env_preloads_us(envp))
		return false;
	if (search && !strchr(path, '/')) {
		if (!search_path(path, found, sizeof(found)))
			return false;
		path = found;
	}
	return image_loads_preload(path, 0);
}

const char *exec_image_at(int dirfd, const char *path, int flags, char *buf, size_t len)
{
	int n;

	if (!path)
		return NULL;
	if (path[0] == '/' || (dirfd == AT_FDCWD && path[0]))
		return path;
	if (!path[0])
		n = (flags & AT_EMPTY_PATH) ? snprintf(buf, len, "/proc/self/fd/%d", dirfd) : -1;
	else
		n = snprintf(buf, len, "/proc/self/fd/%d/%s", dirfd, path);
	return n > 0 && (size_t)n < len ? buf : NULL;
}
