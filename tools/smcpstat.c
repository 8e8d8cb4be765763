/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * smcpstat: live list of the SMC connections of every smc-preload process on the host.
 *
 * Each process that has SMC connections listens on the abstract unix SOCK_SEQPACKET name
 * "smcp1:stat:<pid>" (see core/conn/statsrv.h for the protocol). This tool finds those names
 * in /proc/net/unix, sends each one "list", and prints what comes back: one flat JSON
 * object per connection. Plain libc, no dependency on the library, so it works on a
 * host where only the preloaded applications have the library.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define NAME_PREFIX "smcp1:stat:"
#define REQUEST_LIST "list"
#define QUERY_TIMEOUT_S 2
#define UNIX_FLAG_ACCEPTCON 0x10000 /* __SO_ACCEPTCON in /proc/net/unix: listening */
#define UNIX_TYPE_SEQPACKET 5
/* of the -t JSON object; bumped only when a key changes meaning or goes away */
#define JSON_VERSION 1

/* ------------------------------------------------------------------ records */

struct conn_rec {
	long pid;
	char comm[64];
	int fd;
	char side[16], state[16], mode[16], reason[32];
	char local_addr[64], peer_addr[64];
	long local_port, peer_port; /* -1 when unknown */
	unsigned long long rx_size, tx_size, bytes_sent, bytes_received;
	bool carried; /* came into its process's image across exec */
	char error[64]; /* the server refused: {"error":"..."} */
};

struct rec_list {
	struct conn_rec *v;
	size_t n, cap;
};

static struct conn_rec *rec_list_add(struct rec_list *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct conn_rec *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		l->v = v;
		l->cap = cap;
	}
	memset(&l->v[l->n], 0, sizeof(l->v[0]));
	return &l->v[l->n++];
}

/* ------------------------------------------------------------------ a flat JSON parser */

/* Just enough JSON for the server's records: one object whose values are strings,
 * integers, null, true or false. Unknown keys are ignored (newer servers may add some). */
struct jparse {
	const char *p, *end;
};

static void jp_ws(struct jparse *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool jp_char(struct jparse *j, char c)
{
	jp_ws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return true;
	}
	return false;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A string into out (truncated to len - 1); \u escapes beyond ASCII become '?'. */
static bool jp_string(struct jparse *j, char *out, size_t len)
{
	size_t n = 0;

	if (!jp_char(j, '"'))
		return false;
	while (j->p < j->end && *j->p != '"') {
		char c = *j->p++;

		if (c == '\\') {
			if (j->p >= j->end)
				return false;
			c = *j->p++;
			switch (c) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': {
				int v = 0;

				if (j->end - j->p < 4)
					return false;
				for (int i = 0; i < 4; i++) {
					int h = hexval(j->p[i]);

					if (h < 0)
						return false;
					v = v * 16 + h;
				}
				j->p += 4;
				c = v > 0 && v < 0x80 ? (char)v : '?';
				break;
			}
			default: /* '"', '\\', '/' stand for themselves */
				break;
			}
		}
		if (n + 1 < len)
			out[n++] = c;
	}
	if (j->p >= j->end)
		return false;
	j->p++;
	out[n] = '\0';
	return true;
}

enum jvalue_kind { JV_STRING, JV_NUMBER, JV_NULL, JV_BOOL };

struct jvalue {
	enum jvalue_kind kind;
	char str[128];
	long long num;
};

static bool jp_value(struct jparse *j, struct jvalue *v)
{
	jp_ws(j);
	if (j->p >= j->end)
		return false;
	if (*j->p == '"') {
		v->kind = JV_STRING;
		return jp_string(j, v->str, sizeof(v->str));
	}
	if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
		char buf[32];
		size_t n = 0;
		char *endp;

		while (j->p < j->end && n + 1 < sizeof(buf) &&
		       (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')))
			buf[n++] = *j->p++;
		buf[n] = '\0';
		errno = 0;
		v->num = strtoll(buf, &endp, 10);
		v->kind = JV_NUMBER;
		return errno == 0 && *endp == '\0';
	}
	static const struct { const char *word; enum jvalue_kind kind; } words[] = {
		{ "null", JV_NULL }, { "true", JV_BOOL }, { "false", JV_BOOL },
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		size_t n = strlen(words[i].word);

		if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[i].word, n) == 0) {
			j->p += n;
			v->kind = words[i].kind;
			v->num = i == 1; /* true */
			return true;
		}
	}
	return false;
}

/* A string value into a field, truncated to fit; "" for any other kind. */
static void copy_str(char *dst, size_t len, const struct jvalue *v)
{
	size_t n = v->kind == JV_STRING ? strnlen(v->str, len - 1) : 0;

	memcpy(dst, v->str, n);
	dst[n] = '\0';
}

static unsigned long long as_u64(const struct jvalue *v)
{
	return v->kind == JV_NUMBER && v->num > 0 ? (unsigned long long)v->num : 0;
}

static void rec_set(struct conn_rec *r, const char *key, const struct jvalue *v)
{
	if (!strcmp(key, "pid"))
		r->pid = (long)as_u64(v);
	else if (!strcmp(key, "comm"))
		copy_str(r->comm, sizeof(r->comm), v);
	else if (!strcmp(key, "fd"))
		r->fd = v->kind == JV_NUMBER ? (int)v->num : -1;
	else if (!strcmp(key, "side"))
		copy_str(r->side, sizeof(r->side), v);
	else if (!strcmp(key, "state"))
		copy_str(r->state, sizeof(r->state), v);
	else if (!strcmp(key, "mode"))
		copy_str(r->mode, sizeof(r->mode), v);
	else if (!strcmp(key, "reason"))
		copy_str(r->reason, sizeof(r->reason), v);
	else if (!strcmp(key, "local_addr"))
		copy_str(r->local_addr, sizeof(r->local_addr), v);
	else if (!strcmp(key, "peer_addr"))
		copy_str(r->peer_addr, sizeof(r->peer_addr), v);
	else if (!strcmp(key, "local_port"))
		r->local_port = v->kind == JV_NUMBER ? (long)v->num : -1;
	else if (!strcmp(key, "peer_port"))
		r->peer_port = v->kind == JV_NUMBER ? (long)v->num : -1;
	else if (!strcmp(key, "rx_size"))
		r->rx_size = as_u64(v);
	else if (!strcmp(key, "tx_size"))
		r->tx_size = as_u64(v);
	else if (!strcmp(key, "bytes_sent"))
		r->bytes_sent = as_u64(v);
	else if (!strcmp(key, "bytes_received"))
		r->bytes_received = as_u64(v);
	else if (!strcmp(key, "carried"))
		r->carried = v->kind == JV_BOOL && v->num;
	else if (!strcmp(key, "error"))
		copy_str(r->error, sizeof(r->error), v);
}

static bool parse_record(const char *text, size_t len, struct conn_rec *r)
{
	struct jparse j = { .p = text, .end = text + len };

	r->fd = -1;
	r->local_port = r->peer_port = -1;
	if (!jp_char(&j, '{'))
		return false;
	if (jp_char(&j, '}'))
		return true;
	do {
		char key[32];
		struct jvalue v;

		if (!jp_string(&j, key, sizeof(key)) || !jp_char(&j, ':') || !jp_value(&j, &v))
			return false;
		rec_set(r, key, &v);
	} while (jp_char(&j, ','));
	if (!jp_char(&j, '}'))
		return false;
	jp_ws(&j);
	return j.p == j.end;
}

/* ------------------------------------------------------------------ discovery */

struct pid_list {
	long *v;
	size_t n, cap;
};

static bool pid_list_has(const struct pid_list *l, long pid)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i] == pid)
			return true;
	return false;
}

static int pid_list_add(struct pid_list *l, long pid)
{
	if (pid_list_has(l, pid))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		long *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = pid;
	return 0;
}

/* The pid in "@smcp1:stat:<pid>", or -1 when the path is not one of ours. */
static long name_pid(const char *path)
{
	const char *digits;
	char *end;
	long pid;

	if (path[0] != '@' || strncmp(path + 1, NAME_PREFIX, strlen(NAME_PREFIX)) != 0)
		return -1;
	digits = path + 1 + strlen(NAME_PREFIX);
	if (*digits < '0' || *digits > '9')
		return -1;
	errno = 0;
	pid = strtol(digits, &end, 10);
	if (errno || *end != '\0' || pid <= 0)
		return -1;
	return pid;
}

/* Listening SEQPACKET sockets named @smcp1:stat:<pid> in /proc/net/unix. */
static int find_servers(struct pid_list *out)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];

	if (!f) {
		fprintf(stderr, "smcpstat: /proc/net/unix: %s\n", strerror(errno));
		return -1;
	}
	if (!fgets(line, sizeof(line), f)) /* header */
		line[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		unsigned long flags;
		unsigned type, st;
		char path[256];
		long pid;

		line[strcspn(line, "\n")] = '\0';
		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %lx %x %x %*s %255s", &flags, &type, &st, path) != 4)
			continue;
		if (type != UNIX_TYPE_SEQPACKET || !(flags & UNIX_FLAG_ACCEPTCON))
			continue;
		pid = name_pid(path);
		if (pid > 0 && pid_list_add(out, pid) < 0) {
			fclose(f);
			fprintf(stderr, "smcpstat: out of memory\n");
			return -1;
		}
	}
	fclose(f);
	return 0;
}

/* ------------------------------------------------------------------ querying */

static int connect_server(long pid)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "%s%ld", NAME_PREFIX, pid);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	struct timeval tv = { .tv_sec = QUERY_TIMEOUT_S };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	/* A stuck server (or a full backlog) must not hang the tool: SO_SNDTIMEO also bounds
	 * connect() on unix sockets. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sun, len) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Queries the process serving pid and appends its connections to out. Returns the
 * number of records, or -1 when the process could not be asked. */
static int query_server(long pid, struct rec_list *out, bool verbose)
{
	char msg[16384];
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd = connect_server(pid), count = 0;
	ssize_t n;

	if (fd < 0) {
		if (verbose) /* gone meanwhile, or another network namespace's name */
			fprintf(stderr, "smcpstat: pid %ld: %s\n", pid, strerror(errno));
		return -1;
	}
	/* The kernel reports the server's pid as seen from our pid namespace. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.pid <= 0)
		cred.pid = (pid_t)pid;
	if (send(fd, REQUEST_LIST, strlen(REQUEST_LIST), MSG_NOSIGNAL) < 0) {
		close(fd);
		return -1;
	}
	while ((n = recv(fd, msg, sizeof(msg), 0)) > 0) {
		struct conn_rec *r;

		if ((size_t)n >= sizeof(msg))
			continue; /* truncated: not a record of ours */
		r = rec_list_add(out);
		if (!r)
			break;
		if (!parse_record(msg, (size_t)n, r)) {
			if (verbose)
				fprintf(stderr, "smcpstat: pid %ld: unreadable record\n", pid);
			out->n--;
			continue;
		}
		if (r->error[0]) {
			if (verbose) /* another user's process */
				fprintf(stderr, "smcpstat: pid %ld: %s\n", pid, r->error);
			out->n--;
			count = -1;
			break;
		}
		r->pid = cred.pid;
		count++;
	}
	if (n < 0 && verbose)
		fprintf(stderr, "smcpstat: pid %ld: %s\n", pid, strerror(errno));
	close(fd);
	return count;
}

/* ------------------------------------------------------------------ output */

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_addr(FILE *f, const char *key, const char *addr, long port)
{
	fprintf(f, ",\"%s_addr\":", key);
	if (*addr)
		json_string(f, addr);
	else
		fputs("null", f);
	if (port >= 0)
		fprintf(f, ",\"%s_port\":%ld", key, port);
	else
		fprintf(f, ",\"%s_port\":null", key);
}

static void print_json_array(const struct rec_list *l)
{
	fputs("[", stdout);
	for (size_t i = 0; i < l->n; i++) {
		const struct conn_rec *r = &l->v[i];

		fprintf(stdout, "%s\n  {\"pid\":%ld,\"comm\":", i ? "," : "", r->pid);
		json_string(stdout, r->comm);
		fprintf(stdout, ",\"fd\":%d,\"side\":", r->fd);
		json_string(stdout, r->side);
		fputs(",\"state\":", stdout);
		json_string(stdout, r->state);
		fputs(",\"mode\":", stdout);
		json_string(stdout, r->mode);
		fputs(",\"reason\":", stdout);
		json_string(stdout, r->reason);
		json_addr(stdout, "local", r->local_addr, r->local_port);
		json_addr(stdout, "peer", r->peer_addr, r->peer_port);
		fprintf(stdout, ",\"rx_size\":%llu,\"tx_size\":%llu,\"bytes_sent\":%llu,"
			"\"bytes_received\":%llu,\"carried\":%s}", r->rx_size, r->tx_size,
			r->bytes_sent, r->bytes_received, r->carried ? "true" : "false");
	}
	fputs(l->n ? "\n]" : "]", stdout);
}

/* ------------------------------------------------------------------ totals */

/* The modes in the order of the SMC_STATS_FILE summary, whose shape the totals copy so
 * that one reader serves both. */
static const char *const mode_names[] = { "shm", "ib", "tcp" };
#define NMODES (sizeof(mode_names) / sizeof(mode_names[0]))
#define MAX_REASONS 32 /* the library has 18 reason names */

struct totals {
	size_t processes;
	unsigned long long conns[NMODES], sent[NMODES], received[NMODES];
	struct { char name[32]; unsigned long long n; } reason[MAX_REASONS];
	size_t nreasons;
};

static void totals_add_reason(struct totals *t, const char *name)
{
	size_t i;

	for (i = 0; i < t->nreasons; i++)
		if (!strcmp(t->reason[i].name, name))
			break;
	if (i == t->nreasons) {
		if (t->nreasons == MAX_REASONS)
			return;
		snprintf(t->reason[i].name, sizeof(t->reason[i].name), "%s", name);
		t->nreasons++;
	}
	t->reason[i].n++;
}

/* Over the records as listed (sorted by pid): a record of an unknown mode counts in no
 * mode, a reason only when it is one ("none" is an upgraded connection). */
static void totals_compute(const struct rec_list *l, struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < l->n; i++) {
		const struct conn_rec *r = &l->v[i];

		if (i == 0 || r->pid != l->v[i - 1].pid)
			t->processes++;
		for (size_t m = 0; m < NMODES; m++) {
			if (strcmp(r->mode, mode_names[m]))
				continue;
			t->conns[m]++;
			t->sent[m] += r->bytes_sent;
			t->received[m] += r->bytes_received;
		}
		if (r->reason[0] && strcmp(r->reason, "none"))
			totals_add_reason(t, r->reason);
	}
}

static void print_json_totals(const struct totals *t)
{
	printf("{\"processes\":%zu,\"connections\":{", t->processes);
	for (size_t m = 0; m < NMODES; m++)
		printf("%s\"%s\":%llu", m ? "," : "", mode_names[m], t->conns[m]);
	fputs("},\"fallback\":{", stdout);
	for (size_t i = 0; i < t->nreasons; i++) {
		fputs(i ? "," : "", stdout);
		json_string(stdout, t->reason[i].name);
		printf(":%llu", t->reason[i].n);
	}
	fputs("},\"bytes\":{", stdout);
	for (size_t m = 0; m < NMODES; m++)
		printf("%s\"%s\":{\"sent\":%llu,\"received\":%llu}", m ? "," : "",
		       mode_names[m], t->sent[m], t->received[m]);
	fputs("}}", stdout);
}

static void print_json(const struct rec_list *l, bool with_totals)
{
	struct totals t;

	if (!with_totals) {
		print_json_array(l);
		putchar('\n');
		return;
	}
	totals_compute(l, &t);
	printf("{\"version\":%d,\"connections\":", JSON_VERSION);
	print_json_array(l);
	fputs(",\n\"totals\":", stdout);
	print_json_totals(&t);
	puts("}");
}

/* One line after the table, in the words of the JSON totals. */
static void print_totals_line(const struct rec_list *l)
{
	struct totals t;
	unsigned long long all = 0;

	totals_compute(l, &t);
	for (size_t m = 0; m < NMODES; m++)
		all += t.conns[m];
	printf("Total: %llu connection%s in %zu process%s (", all, all == 1 ? "" : "s",
	       t.processes, t.processes == 1 ? "" : "es");
	for (size_t m = 0; m < NMODES; m++)
		printf("%s%s %llu", m ? ", " : "", mode_names[m], t.conns[m]);
	fputs("); fallback:", stdout);
	for (size_t i = 0; i < t.nreasons; i++)
		printf("%s %s %llu", i ? "," : "", t.reason[i].name, t.reason[i].n);
	fputs(t.nreasons ? "" : " none", stdout);
	fputs("; bytes sent/received:", stdout);
	for (size_t m = 0; m < NMODES; m++)
		printf("%s %s %llu/%llu", m ? "," : "", mode_names[m], t.sent[m], t.received[m]);
	putchar('\n');
}

/* "addr:port", "[v6]:port" or "*" when unknown. */
static void format_endpoint(char *buf, size_t len, const char *addr, long port)
{
	if (!*addr || port < 0)
		snprintf(buf, len, "*");
	else if (strchr(addr, ':'))
		snprintf(buf, len, "[%s]:%ld", addr, port);
	else
		snprintf(buf, len, "%s:%ld", addr, port);
}

/* RMB sizes are powers of two in practice: 65536 -> "64K". */
static void format_size(char *buf, size_t len, unsigned long long v)
{
	if (v && v % (1024ull * 1024) == 0)
		snprintf(buf, len, "%lluM", v / (1024ull * 1024));
	else if (v && v % 1024 == 0)
		snprintf(buf, len, "%lluK", v / 1024);
	else
		snprintf(buf, len, "%llu", v);
}

enum { COL_PID, COL_COMM, COL_FD, COL_SIDE, COL_STATE, COL_MODE, COL_LOCAL, COL_PEER,
       COL_RX, COL_TX, COL_SENT, COL_RECV, COL_REASON, NCOLS };

static const char *const col_titles[NCOLS] = {
	"PID", "COMM", "FD", "SIDE", "STATE", "MODE", "LOCAL", "PEER",
	"RX-RMB", "TX-RMB", "SENT", "RECEIVED", "REASON",
};
/* Numbers align right, text left. */
static const bool col_right[NCOLS] = {
	[COL_PID] = true, [COL_FD] = true, [COL_RX] = true, [COL_TX] = true,
	[COL_SENT] = true, [COL_RECV] = true,
};

typedef char row_t[NCOLS][80];

static void fill_row(row_t row, const struct conn_rec *r)
{
	snprintf(row[COL_PID], sizeof(row[0]), "%ld", r->pid);
	snprintf(row[COL_COMM], sizeof(row[0]), "%s", r->comm[0] ? r->comm : "?");
	if (r->fd >= 0)
		snprintf(row[COL_FD], sizeof(row[0]), "%d", r->fd);
	else
		snprintf(row[COL_FD], sizeof(row[0]), "-");
	snprintf(row[COL_SIDE], sizeof(row[0]), "%s", r->side);
	snprintf(row[COL_STATE], sizeof(row[0]), "%s", r->state);
	snprintf(row[COL_MODE], sizeof(row[0]), "%s", r->mode);
	format_endpoint(row[COL_LOCAL], sizeof(row[0]), r->local_addr, r->local_port);
	format_endpoint(row[COL_PEER], sizeof(row[0]), r->peer_addr, r->peer_port);
	format_size(row[COL_RX], sizeof(row[0]), r->rx_size);
	format_size(row[COL_TX], sizeof(row[0]), r->tx_size);
	snprintf(row[COL_SENT], sizeof(row[0]), "%llu", r->bytes_sent);
	snprintf(row[COL_RECV], sizeof(row[0]), "%llu", r->bytes_received);
	/* "none" means upgraded: nothing to explain, unless it came across exec. */
	snprintf(row[COL_REASON], sizeof(row[0]), "%s",
		 strcmp(r->reason, "none") && r->reason[0] ? r->reason
							    : r->carried ? "carried" : "-");
}

static void print_row(const char *const cells[NCOLS], const int width[NCOLS])
{
	for (int c = 0; c < NCOLS; c++) {
		const char *sep = c ? "  " : "";

		if (c == NCOLS - 1)
			printf("%s%s", sep, cells[c]);
		else
			printf("%s%*s", sep, col_right[c] ? width[c] : -width[c], cells[c]);
	}
	putchar('\n');
}

static int print_table(const struct rec_list *l)
{
	row_t *rows = calloc(l->n ? l->n : 1, sizeof(*rows));
	int width[NCOLS];
	const char *cells[NCOLS];

	if (!rows) {
		fprintf(stderr, "smcpstat: out of memory\n");
		return -1;
	}
	for (int c = 0; c < NCOLS; c++)
		width[c] = (int)strlen(col_titles[c]);
	for (size_t i = 0; i < l->n; i++) {
		fill_row(rows[i], &l->v[i]);
		for (int c = 0; c < NCOLS; c++)
			if ((int)strlen(rows[i][c]) > width[c])
				width[c] = (int)strlen(rows[i][c]);
	}
	print_row(col_titles, width);
	for (size_t i = 0; i < l->n; i++) {
		for (int c = 0; c < NCOLS; c++)
			cells[c] = rows[i][c];
		print_row(cells, width);
	}
	free(rows);
	return 0;
}

/* ------------------------------------------------------------------ main */

static int cmp_rec(const void *a, const void *b)
{
	const struct conn_rec *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return (x->fd > y->fd) - (x->fd < y->fd);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: smcpstat [-j] [-t] [-v] [-p PID|NAME] [-P PORT] [-m MODE]\n"
		"List the SMC connections of the processes running smc-preload.\n"
		"\n"
		"  -j, --json        print JSON: an array, one object per connection\n"
		"  -t, --totals      add the totals (connections per mode, fallback reasons,\n"
		"                    bytes): a last line, or with -j an object holding the\n"
		"                    array and the totals\n"
		"  -p, --process P   only the connections of process P: a pid, or a name\n"
		"                    as in the COMM column\n"
		"  -P, --port PORT   only connections with PORT as local or peer port\n"
		"  -m, --mode MODE   only connections in MODE: shm, ib or tcp\n"
		"  -v, --verbose     report processes that could not be queried on stderr\n"
		"  -h, --help        show this help\n"
		"\n"
		"Processes of other users are listed only when run as root.\n");
}

struct filter {
	long pid;         /* -1: any */
	const char *comm; /* NULL: any */
	long port;        /* -1: any */
	const char *mode; /* NULL: any */
};

/* server_pid: the pid in the name the record came from, which -p also matches (the
 * record's own pid is the one seen from our pid namespace). */
static bool filter_keep(const struct filter *f, const struct conn_rec *r, long server_pid)
{
	if (f->pid > 0 && r->pid != f->pid && server_pid != f->pid)
		return false;
	if (f->comm && strcmp(r->comm, f->comm))
		return false;
	if (f->port >= 0 && r->local_port != f->port && r->peer_port != f->port)
		return false;
	if (f->mode && strcmp(r->mode, f->mode))
		return false;
	return true;
}

/* -p: all digits is a pid, anything else a process name. */
static int parse_process(const char *arg, struct filter *f)
{
	char *end;

	if (*arg >= '0' && *arg <= '9') {
		errno = 0;
		f->pid = strtol(arg, &end, 10);
		if (errno || *end || f->pid <= 0) {
			fprintf(stderr, "smcpstat: -p: not a pid: '%s'\n", arg);
			return -1;
		}
		return 0;
	}
	if (!*arg) {
		fprintf(stderr, "smcpstat: -p: empty process name\n");
		return -1;
	}
	f->comm = arg;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "totals", no_argument, NULL, 't' },
		{ "process", required_argument, NULL, 'p' },
		{ "pid", required_argument, NULL, 'p' },
		{ "port", required_argument, NULL, 'P' },
		{ "mode", required_argument, NULL, 'm' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct filter filt = { .pid = -1, .port = -1 };
	struct pid_list pids = { 0 };
	struct rec_list recs = { 0 };
	bool json = false, verbose = false, totals = false;
	int opt, rc = 0;

	while ((opt = getopt_long(argc, argv, "hjtp:P:m:v", longopts, NULL)) != -1) {
		char *end;
		size_t m;

		switch (opt) {
		case 'j':
			json = true;
			break;
		case 't':
			totals = true;
			break;
		case 'v':
			verbose = true;
			break;
		case 'p':
			if (parse_process(optarg, &filt) < 0)
				return 2;
			break;
		case 'P':
			errno = 0;
			filt.port = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || filt.port < 1 || filt.port > 65535) {
				fprintf(stderr, "smcpstat: -P: not a port: '%s'\n", optarg);
				return 2;
			}
			break;
		case 'm':
			for (m = 0; m < NMODES; m++)
				if (!strcmp(optarg, mode_names[m]))
					break;
			if (m == NMODES) {
				fprintf(stderr, "smcpstat: -m: mode '%s' is none of shm, ib, tcp\n",
					optarg);
				return 2;
			}
			filt.mode = mode_names[m];
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "smcpstat: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (find_servers(&pids) < 0)
		return 1;
	for (size_t i = 0; i < pids.n; i++) {
		size_t first = recs.n, keep = first;

		if (query_server(pids.v[i], &recs, verbose) < 0) {
			recs.n = first;
			continue;
		}
		for (size_t k = first; k < recs.n; k++)
			if (filter_keep(&filt, &recs.v[k], pids.v[i]))
				recs.v[keep++] = recs.v[k];
		recs.n = keep;
	}
	if (recs.n)
		qsort(recs.v, recs.n, sizeof(recs.v[0]), cmp_rec);
	if (json) {
		print_json(&recs, totals);
	} else if (print_table(&recs) < 0) {
		rc = 1;
	} else if (totals) {
		print_totals_line(&recs);
	}
	if (fflush(stdout) != 0)
		rc = 1;
	free(pids.v);
	free(recs.v);
	return rc;
}
