/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * rdv_attack: another local user's attacks on the rendezvous of preloaded processes,
 * and the legitimate client whose delay they cost, for tests/integration/rdv_hold.sh,
 * rdv_flood.sh and rdv_path_attack.sh. IPv4 loopback only; the attackers run without
 * the library.
 *
 *   rdv_attack legit PORT COUNT
 *       COUNT short connections, one after the other, to 127.0.0.1:PORT (the
 *       tests/progs/smc_churn server): connect, a 64-byte request that starts with
 *       MARKER, check the 64-byte response, close. Prints "LAT <usec>" per connection
 *       (connect to the last response byte), then
 *       "RESULT ok=N failed=F median_us=M max_us=X" and exits 0 only when all worked.
 *   rdv_attack hold PORT SECS KEEP PAUSE_MS silent|proposal
 *       "Holding handshakes open" (same-host rendezvous, abstract names): keeps up to
 *       KEEP TCP connections to 127.0.0.1:PORT queued, each from a bound odd port whose
 *       per-connection name ("\0smcp1:c:<client>-<server>") it binds itself, so the
 *       server, which joins it inside accept(), finds a holder that owns the TCP
 *       client (the owner check passes). silent: accepts the server's rendezvous
 *       connection and never sends its Proposal. proposal: sends a valid-looking
 *       Proposal (its 4-tuple, two eventfds) and never the Confirm. A try ends when the
 *       server closes the rendezvous connection; PAUSE_MS later a new one is queued (an
 *       application that accepts until EAGAIN would otherwise never get back to its
 *       other sockets while the attack lasts, whatever the cost of one try). After SECS
 *       prints "RESULT tries=T joined=J bytes=B fds=D accepts=A marker=K maxhold_ms=H"
 *       (T connections made, J joined by the server, B bytes and D descriptors it
 *       received, A of them Accepts for its own connections, K times it saw the
 *       legitimate clients' MARKER, the longest time the server held a try).
 *   rdv_attack watch DIR|- SECS silent|garbage
 *       "Silent connector" (path rendezvous): watches DIR (inotify, and a scan of DIR and
 *       of /proc/net/unix every millisecond: the paths of bound sockets are listed there
 *       whatever DIR's mode) and connects to every new "c-<token>" socket; stays silent,
 *       or sends a garbage message. With "-": the same for the per-connection abstract
 *       names ("@smcp1:c:") /proc/net/unix lists. After SECS prints "RESULT seen=S connected=C
 *       bytes=B msgs=M fds=D marker=K" (what arrived on those connections: a client's
 *       Proposal would be one of the msgs).
 *   rdv_attack flood DIR|- SECS
 *       Floods every rendezvous socket it can find, as fast as it can: the
 *       per-connection names of /proc/net/unix ("@smcp1:c:", "@smcp1:t:", connected
 *       and kept until their backlog refuses more), the "c-*" sockets of DIR (listed, or
 *       found in /proc/net/unix; same),
 *       and garbage datagrams to the listeners' "@smcp1:l:" names. After SECS prints
 *       "RESULT names=N connects=C refused=R datagrams=G bytes=B msgs=M fds=D marker=K".
 *   rdv_attack plant DIR SECS
 *       SMC_RDV_DIR squatting: creates DIR (mode 0777) unless it exists, and plants in it
 *       what a rendezvous directory holds, under plausible names: listening sockets
 *       "c-0000000000000001" and "c-ffffffffffffffff", a regular file
 *       "c-1111111111111111", a symlink "c-2222222222222222" to /etc/passwd and a
 *       directory "bpf" (where the library looks for the map). After SECS prints
 *       "RESULT accepted=A planted=P intact=I" (connections its sockets accepted, and how
 *       many of the P objects are still there, the same ones).
 * The attacks print "OK ..." once started; SIGTERM ends them before SECS.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/wire/clc.h"
#include "tests/progs/rdv_names.h"

#define MSG_LEN 64 /* tests/progs/smc_churn.c */
#define MAX_LEGIT 4096
#define MAX_HOLD 32
#define MAX_CONNS 4096
#define MAX_NAMES 4096
#define MARKER "LEGIT-PAYLOAD-7f3a" /* starts every legitimate request */

/* SIGTERM ends an attack early (its RESULT line is printed all the same). */
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static long long now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000LL + t.tv_nsec / 1000;
}

/* ------------------------------------------------------------ what the attacker saw */

static unsigned long rx_bytes, rx_msgs, rx_fds, rx_marker, rx_accepts;
/* of rx_msgs: a client's same-host Proposal without descriptors (the by-key kind) */
static unsigned long rx_proposals;

/* The marker as the client sent it, and as tests/progs/smc_churn's server answers it. */
static bool has_marker(const uint8_t *b, size_t n)
{
	size_t m = sizeof(MARKER) - 1;
	uint8_t resp[sizeof(MARKER)];

	for (size_t i = 0; i < m; i++)
		resp[i] = (uint8_t)(MARKER[i] ^ 0x5A ^ i);
	for (size_t i = 0; i + m <= n; i++)
		if (memcmp(b + i, MARKER, m) == 0 || memcmp(b + i, resp, m) == 0)
			return true;
	return false;
}

/* Whatever a descriptor handed to us holds (a memfd: its bytes) is searched for the
 * marker too, then closed. */
static void take_fd(int fd)
{
	static uint8_t buf[1 << 16];
	ssize_t n;
	off_t off = 0;

	rx_fds++;
	while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
		if (has_marker(buf, (size_t)n))
			rx_marker++;
		off += n;
	}
	close(fd);
}

/* Reads one message from fd: its bytes and descriptors are counted and searched. The
 * length, 0 at EOF, -1 when nothing is there (or an error: errno). */
static ssize_t take_msg(int fd, struct clc_msg *decoded, bool *is_clc)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 16)];
	} ctl;
	uint8_t buf[4096];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
			      .msg_controllen = sizeof(ctl.space) };
	ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			take_fd(f);
		}
	}
	if (n > 0) {
		rx_bytes += (unsigned long)n;
		rx_msgs++;
		struct clc_msg m;
		bool clc = clc_decode(buf, (size_t)n, &m) == 0;

		if (has_marker(buf, (size_t)n))
			rx_marker++;
		if (clc && m.variant == CLC_SAMEHOST && m.type == CLC_PROPOSAL &&
		    msg.msg_controllen == 0)
			rx_proposals++;
		if (is_clc) {
			*is_clc = clc;
			if (clc)
				*decoded = m;
		}
	}
	return n;
}

/* ------------------------------------------------------------ names */

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* ------------------------------------------------------------ legit */

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

static int legit_one(uint16_t port, int seq, long long *us)
{
	struct sockaddr_in srv = loopback(port);
	struct timeval tmo = { .tv_sec = 60 };
	uint8_t req[MSG_LEN], resp[MSG_LEN];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	long long t0 = now_us();
	size_t got = 0;

	if (fd < 0)
		return -1;
	memcpy(req, MARKER, sizeof(MARKER) - 1);
	for (size_t i = sizeof(MARKER) - 1; i < MSG_LEN; i++)
		req[i] = (uint8_t)(seq + i * 7);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) < 0 ||
	    send(fd, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req)) {
		fprintf(stderr, "connection %d: %s\n", seq, strerror(errno));
		close(fd);
		return -1;
	}
	while (got < sizeof(resp)) {
		ssize_t r = recv(fd, resp + got, sizeof(resp) - got, 0);

		if (r <= 0) {
			fprintf(stderr, "connection %d: %s\n", seq, r ? strerror(errno) : "EOF");
			close(fd);
			return -1;
		}
		got += (size_t)r;
	}
	*us = now_us() - t0;
	close(fd);
	for (int i = 0; i < MSG_LEN; i++)
		if (resp[i] != (uint8_t)(req[i] ^ 0x5A ^ i)) {
			fprintf(stderr, "connection %d: wrong response byte %d\n", seq, i);
			return -1;
		}
	return 0;
}

static int legit(uint16_t port, int count)
{
	static long long lat[MAX_LEGIT];
	int ok = 0, failed = 0;

	for (int i = 0; i < count; i++) {
		long long us = 0;

		if (legit_one(port, i, &us) == 0) {
			lat[ok++] = us;
			printf("LAT %lld\n", us);
		} else {
			failed++;
		}
		/* a short pause: connections spread over the attack, not one burst */
		nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
	}
	qsort(lat, (size_t)ok, sizeof(lat[0]), cmp_ll);
	printf("RESULT ok=%d failed=%d median_us=%lld max_us=%lld\n", ok, failed,
	       ok ? lat[ok / 2] : 0, ok ? lat[ok - 1] : 0);
	return failed ? 1 : 0;
}

/* ------------------------------------------------------------ hold */

struct hold {
	int tcp, name, ufd; /* -1 when not there */
	uint16_t port;
	long long joined_at;
	long long next_at; /* no new try before */
	bool proposed;
};

static unsigned long tries, joined;
static long long maxhold_us;

static void hold_close(struct hold *h, long long pause_us)
{
	if (h->ufd >= 0 && h->joined_at) {
		long long held = now_us() - h->joined_at;

		if (held > maxhold_us)
			maxhold_us = held;
	}
	if (h->ufd >= 0)
		close(h->ufd);
	if (h->name >= 0)
		close(h->name);
	if (h->tcp >= 0) {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		/* a reset: no TIME_WAIT left on the port for the next try */
		setsockopt(h->tcp, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(h->tcp);
	}
	*h = (struct hold){ .tcp = -1, .name = -1, .ufd = -1, .next_at = now_us() + pause_us };
}

/* Queues one connection: a bound odd port, our listener on its name, the connect. */
static int hold_open(struct hold *h, uint16_t server_port)
{
	struct sockaddr_in local = loopback(0), srv = loopback(server_port);
	socklen_t len = sizeof(local);
	struct sockaddr_un un;
	socklen_t ulen;

	for (int i = 0; i < 100; i++) {
		h->tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (h->tcp < 0 || bind(h->tcp, (struct sockaddr *)&local, sizeof(local)) < 0 ||
		    getsockname(h->tcp, (struct sockaddr *)&local, &len) < 0)
			return -1;
		if (ntohs(local.sin_port) & 1)
			break; /* the server joins the name of an odd port only */
		close(h->tcp);
		h->tcp = -1;
		local = loopback(0);
		len = sizeof(local);
	}
	if (h->tcp < 0)
		return -1;
	h->port = ntohs(local.sin_port);
	ulen = rdv_conn_name(&un, h->port, server_port);
	h->name = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (h->name < 0 || bind(h->name, (struct sockaddr *)&un, ulen) < 0 ||
	    listen(h->name, 4) < 0 || connect(h->tcp, (struct sockaddr *)&srv, sizeof(srv)) < 0) {
		fprintf(stderr, "hold: port %u: %s\n", h->port, strerror(errno));
		hold_close(h, 100 * 1000);
		return -1;
	}
	tries++;
	return 0;
}

/* A Proposal that passes every check of the server's: our own 4-tuple, two eventfds. */
static void hold_propose(struct hold *h, uint16_t server_port)
{
	struct clc_msg m = { .variant = CLC_SAMEHOST, .type = CLC_PROPOSAL };
	struct sockaddr_in local = loopback(h->port), srv = loopback(server_port);
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 2)];
	} ctl;
	uint8_t buf[CLC_MAX_LEN];
	int bells[2] = { eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK),
			 eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) };
	struct iovec iov = { .iov_base = buf };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
			      .msg_controllen = sizeof(ctl.space) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	ssize_t n;

	m.u.s_prop.proto = CLC_SAMEHOST_PROTO;
	m.u.s_prop.c2s_size = 65536;
	m.u.s_prop.s2c_size = 65536;
	m.u.s_prop.client_token = 0x1234567890abcdefULL;
	clc_sh_set_addrs(&m.u.s_prop, (struct sockaddr *)&local, sizeof(local),
			 (struct sockaddr *)&srv, sizeof(srv));
	n = clc_encode(&m, buf, sizeof(buf));
	if (n < 0 || bells[0] < 0 || bells[1] < 0) {
		fprintf(stderr, "hold: cannot build the Proposal\n");
		exit(1);
	}
	iov.iov_len = (size_t)n;
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(bells));
	memcpy(CMSG_DATA(c), bells, sizeof(bells));
	if (sendmsg(h->ufd, &msg, MSG_NOSIGNAL) != n)
		fprintf(stderr, "hold: Proposal not sent: %s\n", strerror(errno));
	close(bells[0]);
	close(bells[1]);
	h->proposed = true;
}

static int hold(uint16_t server_port, int secs, int keep, int pause_ms, bool propose)
{
	long long pause_us = pause_ms * 1000LL;
	struct hold h[MAX_HOLD];
	long long end = now_us() + secs * 1000000LL;

	for (int i = 0; i < keep; i++)
		h[i] = (struct hold){ .tcp = -1, .name = -1, .ufd = -1 };
	while (!stop && now_us() < end) {
		struct pollfd pfd[MAX_HOLD];

		for (int i = 0; i < keep; i++) {
			if (h[i].tcp < 0 && now_us() >= h[i].next_at)
				(void)hold_open(&h[i], server_port);
			pfd[i] = (struct pollfd){ .fd = h[i].ufd >= 0 ? h[i].ufd : h[i].name,
						  .events = POLLIN };
		}
		if (poll(pfd, (nfds_t)keep, 10) <= 0)
			continue;
		for (int i = 0; i < keep; i++) {
			if (!pfd[i].revents || h[i].tcp < 0)
				continue;
			if (h[i].ufd < 0) {
				h[i].ufd = accept4(h[i].name, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
				if (h[i].ufd < 0)
					continue;
				h[i].joined_at = now_us();
				joined++;
				if (propose)
					hold_propose(&h[i], server_port);
				continue;
			}
			for (;;) {
				struct clc_msg m;
				bool clc = false;
				ssize_t n = take_msg(h[i].ufd, &m, &clc);

				if (n > 0 && clc && m.type == CLC_ACCEPT)
					rx_accepts++; /* for our own connection: never Confirmed */
				if (n > 0)
					continue;
				if (n == 0 || (errno != EAGAIN && errno != EINTR))
					hold_close(&h[i], pause_us); /* the server gave up */
				break;
			}
		}
	}
	for (int i = 0; i < keep; i++)
		hold_close(&h[i], 0);
	printf("RESULT tries=%lu joined=%lu bytes=%lu fds=%lu accepts=%lu marker=%lu "
	       "maxhold_ms=%lld\n", tries, joined, rx_bytes, rx_fds, rx_accepts, rx_marker,
	       maxhold_us / 1000);
	return 0;
}

/* ------------------------------------------------------------ connections we keep */

static struct pollfd conns[MAX_CONNS];
static int nconns;
static unsigned long connects, refused, datagrams;

/* A nonblocking seqpacket connection to un, kept (its messages are read) when made. */
static bool connect_keep(const struct sockaddr_un *un, socklen_t len, bool garbage)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return false;
	if (nconns == MAX_CONNS || connect(fd, (const struct sockaddr *)un, len) < 0) {
		refused++;
		close(fd);
		return false;
	}
	connects++;
	if (garbage)
		(void)!send(fd, "\x01garbage, not CLC\xff", 18, MSG_NOSIGNAL | MSG_DONTWAIT);
	conns[nconns++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	return true;
}

/* Reads whatever arrived on the kept connections; drops the closed ones. */
static void conns_drain(int ms)
{
	if (poll(conns, (nfds_t)nconns, ms) <= 0)
		return;
	for (int i = 0; i < nconns; i++) {
		if (!conns[i].revents)
			continue;
		for (;;) {
			ssize_t n = take_msg(conns[i].fd, NULL, NULL);

			if (n > 0)
				continue;
			if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				close(conns[i].fd);
				conns[i--] = conns[--nconns];
			}
			break;
		}
	}
}

/* ------------------------------------------------------------ watch */

struct seen {
	char name[128]; /* an abstract per-connection name is 81 */
};

static struct seen seen_names[MAX_NAMES];
static int nseen;

static bool seen_before(const char *name)
{
	for (int i = 0; i < nseen; i++)
		if (strcmp(seen_names[i].name, name) == 0)
			return true;
	if (nseen < MAX_NAMES)
		snprintf(seen_names[nseen++].name, sizeof(seen_names[0].name), "%s", name);
	return false;
}

static socklen_t path_name(struct sockaddr_un *un, const char *dir, const char *name)
{
	size_t d = strlen(dir), n = strlen(name);

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (d + 1 + n >= sizeof(un->sun_path))
		return 0; /* too long to be a rendezvous socket: connect() fails on it */
	memcpy(un->sun_path, dir, d);
	un->sun_path[d] = '/';
	memcpy(un->sun_path + d + 1, name, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + d + 1 + n + 1);
}

/* The names of dir's "c-*" sockets: those a listing of dir shows (when we may read it)
 * and those /proc/net/unix shows, which lists every bound path of this network
 * namespace whatever the directory's mode (--setup makes it 1733: no listing). Calls
 * fn(dir, name, arg) for each. */
static void dir_names(const char *dir, void (*fn)(const char *, const char *, void *), void *arg)
{
	size_t dl = strlen(dir);
	DIR *d = opendir(dir);
	struct dirent *e;
	char line[512];
	FILE *f;

	while (d && (e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "c-", 2) == 0)
			fn(dir, e->d_name, arg);
	if (d)
		closedir(d);
	f = fopen("/proc/net/unix", "re");
	while (f && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');

		if (!path || strncmp(path, dir, dl) != 0 || strncmp(path + dl, "/c-", 3) != 0)
			continue;
		path[strcspn(path, " \n")] = 0;
		fn(dir, path + dl + 1, arg);
	}
	if (f)
		fclose(f);
}

static void watch_one(const char *dir, const char *name, void *arg)
{
	struct sockaddr_un un;

	if (!seen_before(name))
		connect_keep(&un, path_name(&un, dir, name), *(bool *)arg);
}

/* Every new c-* socket of dir, connected to once. */
static void dir_scan(const char *dir, bool garbage)
{
	dir_names(dir, watch_one, &garbage);
}

/* Every new per-connection abstract name ("@smcp1:c:") of /proc/net/unix, connected to
 * once. */
static void abstract_scan(bool garbage)
{
	FILE *f = fopen("/proc/net/unix", "re");
	char line[512];

	while (f && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, " @smcp1:c:");
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		size_t n;

		if (!at)
			continue;
		at += 2;
		n = strcspn(at, " \n");
		at[n] = 0;
		if (n + 1 >= sizeof(un.sun_path) || seen_before(at))
			continue;
		memcpy(un.sun_path + 1, at, n);
		connect_keep(&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n),
			     garbage);
	}
	if (f)
		fclose(f);
}

static int watch(const char *dir, int secs, bool garbage)
{
	long long end = now_us() + secs * 1000000LL;
	int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

	if (in < 0)
		return 1;
	if (strcmp(dir, "-") == 0) {
		printf("OK watching abstract names\n");
		fflush(stdout);
		while (!stop && now_us() < end) {
			abstract_scan(garbage);
			conns_drain(0);
		}
		conns_drain(0);
		printf("RESULT seen=%d connected=%lu bytes=%lu msgs=%lu proposals=%lu fds=%lu "
		       "marker=%lu\n", nseen, connects, rx_bytes, rx_msgs, rx_proposals, rx_fds,
		       rx_marker);
		return 0;
	}
	/* a directory we may not read takes no watch: /proc/net/unix still tells */
	if (inotify_add_watch(in, dir, IN_CREATE) < 0)
		printf("OK watching %s (no inotify: %s)\n", dir, strerror(errno));
	else
		printf("OK watching %s\n", dir);
	fflush(stdout);
	while (!stop && now_us() < end) {
		char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
		ssize_t n = read(in, ev, sizeof(ev));

		for (ssize_t off = 0; n > 0 && off < n;) {
			struct inotify_event *ie = (struct inotify_event *)(ev + off);
			struct sockaddr_un un;

			if (ie->len && strncmp(ie->name, "c-", 2) == 0 && !seen_before(ie->name))
				connect_keep(&un, path_name(&un, dir, ie->name), garbage);
			off += (ssize_t)(sizeof(*ie) + ie->len);
		}
		dir_scan(dir, garbage); /* what inotify may have coalesced or missed */
		conns_drain(1);
	}
	conns_drain(0);
	printf("RESULT seen=%d connected=%lu bytes=%lu msgs=%lu proposals=%lu fds=%lu marker=%lu\n",
	       nseen, connects, rx_bytes, rx_msgs, rx_proposals, rx_fds, rx_marker);
	return 0;
}

/* ------------------------------------------------------------ flood */

/* Fills a backlog: connects to un until it refuses (or we hold too many). */
static void flood_one(const struct sockaddr_un *un, socklen_t len)
{
	for (int i = 0; i < 64 && connect_keep(un, len, true); i++)
		;
}

/* The abstract rendezvous names of /proc/net/unix ("@smcp1:..."). */
static void flood_proc(int dgram)
{
	FILE *f = fopen("/proc/net/unix", "re");
	char line[512];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, " @smcp1:");
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		socklen_t len;
		size_t n;

		if (!at)
			continue;
		at += 2; /* past " @" */
		n = strcspn(at, " \n");
		if (n + 1 >= sizeof(un.sun_path))
			continue;
		memcpy(un.sun_path + 1, at, n); /* abstract: leading NUL */
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
		(void)seen_before(at - 1);
		if (strncmp(at, "smcp1:l:", 8) == 0) {
			/* a listener's pool setup name: datagrams, never read as a request */
			for (int i = 0; i < 64; i++)
				if (sendto(dgram, "garbage", 7, MSG_DONTWAIT | MSG_NOSIGNAL,
					   (struct sockaddr *)&un, len) == 7)
					datagrams++;
		} else {
			flood_one(&un, len);
		}
	}
	fclose(f);
}

static void flood_name(const char *dir, const char *name, void *arg)
{
	struct sockaddr_un un;
	socklen_t len = path_name(&un, dir, name);

	(void)arg;
	(void)seen_before(name);
	flood_one(&un, len);
}

static void flood_dir(const char *dir)
{
	dir_names(dir, flood_name, NULL);
}

static int flood(const char *dir, int secs)
{
	long long end = now_us() + secs * 1000000LL;
	int dgram = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (dgram < 0)
		return 1;
	printf("OK flooding\n");
	fflush(stdout);
	while (!stop && now_us() < end) {
		flood_proc(dgram);
		if (strcmp(dir, "-") != 0)
			flood_dir(dir);
		conns_drain(0);
		/* kept connections are released over time, so new names find room */
		while (nconns > MAX_CONNS / 2) {
			close(conns[0].fd);
			conns[0] = conns[--nconns];
		}
	}
	conns_drain(0);
	printf("RESULT names=%d connects=%lu refused=%lu datagrams=%lu bytes=%lu msgs=%lu "
	       "proposals=%lu fds=%lu marker=%lu\n", nseen, connects, refused, datagrams,
	       rx_bytes, rx_msgs, rx_proposals, rx_fds, rx_marker);
	return 0;
}

/* ------------------------------------------------------------ plant */

#define PLANTED 5

static int plant(const char *dir, int secs)
{
	static const char *const names[PLANTED] = { "c-0000000000000001", "c-ffffffffffffffff",
						    "c-1111111111111111", "c-2222222222222222",
						    "bpf" };
	long long end = now_us() + secs * 1000000LL;
	struct stat want[PLANTED];
	struct pollfd lfd[2];
	unsigned long accepted = 0;
	int intact = 0;

	if (mkdir(dir, 0777) == 0)
		chmod(dir, 0777); /* whatever our umask */
	for (int i = 0; i < PLANTED; i++) {
		struct sockaddr_un un;
		socklen_t len = path_name(&un, dir, names[i]);
		int fd = -1, r;

		if (i < 2) {
			fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
			r = fd < 0 || bind(fd, (struct sockaddr *)&un, len) < 0 || listen(fd, 16) < 0 ||
			    chmod(un.sun_path, 0666) < 0;
			lfd[i] = (struct pollfd){ .fd = fd, .events = POLLIN };
		} else if (i == 2) {
			r = (fd = open(un.sun_path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666)) < 0;
			if (fd >= 0)
				close(fd);
		} else if (i == 3) {
			r = symlink("/etc/passwd", un.sun_path) < 0;
		} else {
			r = mkdir(un.sun_path, 0777) < 0;
		}
		if (r || lstat(un.sun_path, &want[i]) < 0) {
			printf("ERROR planting %s: %s\n", un.sun_path, strerror(errno));
			return 1;
		}
	}
	printf("OK planted %d in %s\n", PLANTED, dir);
	fflush(stdout);
	while (!stop && now_us() < end) {
		if (poll(lfd, 2, 50) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			int fd = lfd[i].revents ? accept4(lfd[i].fd, NULL, NULL, SOCK_CLOEXEC) : -1;

			if (fd >= 0) {
				accepted++;
				while (take_msg(fd, NULL, NULL) > 0)
					;
				close(fd);
			}
		}
	}
	for (int i = 0; i < PLANTED; i++) {
		struct sockaddr_un un;
		struct stat st;

		path_name(&un, dir, names[i]);
		if (lstat(un.sun_path, &st) == 0 && st.st_ino == want[i].st_ino &&
		    st.st_dev == want[i].st_dev && st.st_mtime == want[i].st_mtime)
			intact++;
		else
			printf("CHANGED %s\n", un.sun_path);
	}
	printf("RESULT accepted=%lu planted=%d intact=%d bytes=%lu fds=%lu\n", accepted, PLANTED,
	       intact, rx_bytes, rx_fds);
	return 0;
}

/* ------------------------------------------------------------ main */

static int usage(void)
{
	fprintf(stderr, "usage: rdv_attack legit PORT COUNT\n"
			"       rdv_attack hold PORT SECS KEEP PAUSE_MS silent|proposal\n"
			"       rdv_attack watch DIR|- SECS silent|garbage\n"
			"       rdv_attack flood DIR|- SECS\n"
			"       rdv_attack plant DIR SECS\n");
	return 2;
}

static int port_arg(const char *s)
{
	int p = atoi(s);

	return p > 0 && p <= 65535 ? p : -1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &(struct sigaction){ .sa_handler = on_term }, NULL);
	if (argc == 4 && strcmp(argv[1], "legit") == 0) {
		int port = port_arg(argv[2]), count = atoi(argv[3]);

		if (port < 0 || count <= 0 || count > MAX_LEGIT)
			return usage();
		return legit((uint16_t)port, count);
	}
	if (argc == 7 && strcmp(argv[1], "hold") == 0) {
		int port = port_arg(argv[2]), secs = atoi(argv[3]), keep = atoi(argv[4]);
		int pause_ms = atoi(argv[5]);
		bool propose = strcmp(argv[6], "proposal") == 0;

		if (port < 0 || secs <= 0 || keep <= 0 || keep > MAX_HOLD || pause_ms < 0 ||
		    (!propose && strcmp(argv[6], "silent") != 0))
			return usage();
		printf("OK holding %d\n", keep);
		return hold((uint16_t)port, secs, keep, pause_ms, propose);
	}
	if (argc == 5 && strcmp(argv[1], "watch") == 0) {
		bool garbage = strcmp(argv[4], "garbage") == 0;

		if (atoi(argv[3]) <= 0 || (!garbage && strcmp(argv[4], "silent") != 0))
			return usage();
		return watch(argv[2], atoi(argv[3]), garbage);
	}
	if (argc == 4 && strcmp(argv[1], "flood") == 0) {
		if (atoi(argv[3]) <= 0)
			return usage();
		return flood(argv[2], atoi(argv[3]));
	}
	if (argc == 4 && strcmp(argv[1], "plant") == 0) {
		if (atoi(argv[3]) <= 0)
			return usage();
		return plant(argv[2], atoi(argv[3]));
	}
	return usage();
}
