/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Data-path wrappers: read, readv, recv, recvfrom, recvmsg, recvmmsg, write, writev,
 * send, sendto, sendmsg, sendmmsg, sendfile, sendfile64, splice; fdopen.
 *
 * Every receive funnels into smc_sock_recv(fd, iov, n, flags) and every send into
 * smc_sock_send(). What the kernel's TCP does with the other arguments of the richer
 * calls (addresses, msghdr fields, mmsghdr batches) is reproduced here, so a tracked
 * stream socket answers exactly like a TCP one.
 */
#include "preload/wrap.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/base/clock.h"

/* The kernel's limits on vectors (UIO_MAXIOV) and on one transfer (MAX_RW_COUNT). */
#define SMC_UIO_MAXIOV 1024
#define SMC_MAX_RW_COUNT ((size_t)INT_MAX & ~(size_t)4095)

/* ------------------------------------------------------------------ receive */

SMC_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(read)(fd, buf, n);
	struct iovec iov = { .iov_base = buf, .iov_len = n };
	return smc_sock_recv(fd, &iov, 1, 0);
}
SMC_EXPORT ssize_t __read(int fd, void *buf, size_t n) SMC_ALIAS(read);
ssize_t smc_impl_read(int fd, void *buf, size_t n) SMC_INTERNAL_ALIAS(read);

SMC_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(readv)(fd, iov, iovcnt);
	if (iovcnt < 0 || iovcnt > SMC_UIO_MAXIOV) {
		errno = EINVAL;
		return -1;
	}
	return smc_sock_recv(fd, iov, iovcnt, 0);
}
ssize_t smc_impl_readv(int fd, const struct iovec *iov, int iovcnt) SMC_INTERNAL_ALIAS(readv);

SMC_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(recv)(fd, buf, n, flags);
	struct iovec iov = { .iov_base = buf, .iov_len = n };
	return smc_sock_recv(fd, &iov, 1, flags);
}
ssize_t smc_impl_recv(int fd, void *buf, size_t n, int flags) SMC_INTERNAL_ALIAS(recv);

/*
 * A connected stream socket has no source address to report: the kernel copies none
 * and stores 0 into *addrlen (after the data was consumed, so its errors come late:
 * a negative length is EINVAL, a missing length pointer EFAULT).
 */
static ssize_t report_no_source(ssize_t got, struct sockaddr *addr, socklen_t *addrlen)
{
	if (got < 0 || !addr)
		return got;
	if (!addrlen) {
		errno = EFAULT;
		return -1;
	}
	if ((int)*addrlen < 0) {
		errno = EINVAL;
		return -1;
	}
	*addrlen = 0;
	return got;
}

SMC_EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t n, int flags,
			    __SOCKADDR_ARG addr, socklen_t *restrict addrlen)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(recvfrom)(fd, buf, n, flags, SA_PTR(addr), addrlen);
	struct iovec iov = { .iov_base = buf, .iov_len = n };
	ssize_t got = smc_sock_recv(fd, &iov, 1, flags);
	return report_no_source(got, SA_PTR(addr), addrlen);
}
ssize_t smc_impl_recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
			  socklen_t *addrlen) SMC_INTERNAL_ALIAS(recvfrom);

/* recvmsg() on a tracked stream socket, as TCP fills the msghdr: no address
 * (msg_namelen = 0 when msg_name is set, untouched otherwise), no ancillary data
 * (msg_controllen = 0), msg_flags = 0. */
static ssize_t recvmsg_tracked(int fd, struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen > SMC_UIO_MAXIOV) {
		errno = EMSGSIZE;
		return -1;
	}
	ssize_t got = smc_sock_recv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (got < 0)
		return got;
	if (msg->msg_name)
		msg->msg_namelen = 0;
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	return got;
}

SMC_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	/* the error queue is the kernel socket's, with its ancillary data */
	if (!kind_is_sock(fdtab_kind(fd)) || (flags & MSG_ERRQUEUE)) {
		ssize_t r = REAL(recvmsg)(fd, msg, flags);
		/* descriptors from another process: a listener among them is tracked */
		if (r >= 0 && msg && msg->msg_controllen)
			KEEP_ERRNO(smc_sock_after_fd_receive(msg));
		return r;
	}
	return recvmsg_tracked(fd, msg, flags);
}
ssize_t smc_impl_recvmsg(int fd, struct msghdr *msg, int flags) SMC_INTERNAL_ALIAS(recvmsg);

static int64_t timespec_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/*
 * recvmmsg() as the kernel runs it on a stream socket: one recvmsg per entry; after
 * the first success MSG_WAITFORONE turns into MSG_DONTWAIT; the timeout is checked
 * only between entries (it does not interrupt a blocking receive) and the remaining
 * time is written back. An error after at least one entry returns the count.
 */
static int recvmmsg_tracked(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			    struct timespec *timeout)
{
	int64_t deadline = 0;

	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000) {
			errno = EINVAL;
			return -1;
		}
		deadline = (int64_t)clock_now_ns() + timespec_ns(timeout);
	}
	if (vlen > SMC_UIO_MAXIOV)
		vlen = SMC_UIO_MAXIOV;

	unsigned int done = 0;
	int err = 0;
	while (done < vlen) {
		ssize_t got = recvmsg_tracked(fd, &vec[done].msg_hdr, flags & ~MSG_WAITFORONE);
		if (got < 0) {
			err = errno;
			break;
		}
		vec[done++].msg_len = (unsigned int)got;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (timeout) {
			int64_t left = deadline - (int64_t)clock_now_ns();
			if (left < 0)
				left = 0;
			timeout->tv_sec = left / 1000000000;
			timeout->tv_nsec = left % 1000000000;
			if (left == 0)
				break;
		}
	}
	if (done > 0)
		return (int)done;
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

SMC_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *timeout)
{
	if (!kind_is_sock(fdtab_kind(fd))) {
		int n = REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
		for (int i = 0; vec && i < n; i++)
			if (vec[i].msg_hdr.msg_controllen)
				KEEP_ERRNO(smc_sock_after_fd_receive(&vec[i].msg_hdr));
		return n;
	}
	return recvmmsg_tracked(fd, vec, vlen, flags, timeout);
}
int smc_impl_recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		      struct timespec *timeout) SMC_INTERNAL_ALIAS(recvmmsg);

/* ------------------------------------------------------------------ send */

SMC_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(write)(fd, buf, n);
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	return smc_sock_send(fd, &iov, 1, 0);
}
SMC_EXPORT ssize_t __write(int fd, const void *buf, size_t n) SMC_ALIAS(write);
ssize_t smc_impl_write(int fd, const void *buf, size_t n) SMC_INTERNAL_ALIAS(write);

SMC_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(writev)(fd, iov, iovcnt);
	if (iovcnt < 0 || iovcnt > SMC_UIO_MAXIOV) {
		errno = EINVAL;
		return -1;
	}
	return smc_sock_send(fd, iov, iovcnt, 0);
}
ssize_t smc_impl_writev(int fd, const struct iovec *iov, int iovcnt) SMC_INTERNAL_ALIAS(writev);

SMC_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(send)(fd, buf, n, flags);
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	return smc_sock_send(fd, &iov, 1, flags);
}
SMC_EXPORT ssize_t __send(int fd, const void *buf, size_t n, int flags) SMC_ALIAS(send);

/* A connected stream socket ignores a destination, but the kernel still rejects a
 * length it could not copy (negative or larger than sockaddr_storage). A destination
 * on a socket that is no SMC connection goes to the kernel as given: TCP Fast Open's
 * sendto(MSG_FASTOPEN) connects with it (that connection stays TCP). */
SMC_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			  __CONST_SOCKADDR_ARG addr, socklen_t addrlen)
{
	enum fd_kind k = fdtab_kind(fd);

	if (!kind_is_sock(k) || (SA_PTR(addr) && k != FD_SMC))
		return REAL(sendto)(fd, buf, n, flags, SA_PTR(addr), addrlen);
	if (SA_PTR(addr) && addrlen > sizeof(struct sockaddr_storage)) {
		errno = EINVAL;
		return -1;
	}
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	return smc_sock_send(fd, &iov, 1, flags);
}
ssize_t smc_impl_sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
			socklen_t addrlen) SMC_INTERNAL_ALIAS(sendto);

/* sendmsg() on a tracked stream socket: the destination is ignored as TCP does;
 * ancillary data has no meaning on an SMC connection and is ignored. */
static ssize_t sendmsg_tracked(int fd, const struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen > SMC_UIO_MAXIOV) {
		errno = EMSGSIZE;
		return -1;
	}
	return smc_sock_send(fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

SMC_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	if (msg && msg->msg_controllen)
		KEEP_ERRNO(smc_sock_before_fd_pass(msg));
	enum fd_kind k = fdtab_kind(fd);

	/* a destination on a socket that is no SMC connection: as sendto() */
	if (!kind_is_sock(k) || (msg && msg->msg_name && k != FD_SMC))
		return REAL(sendmsg)(fd, msg, flags);
	return sendmsg_tracked(fd, msg, flags);
}
ssize_t smc_impl_sendmsg(int fd, const struct msghdr *msg, int flags) SMC_INTERNAL_ALIAS(sendmsg);

/* sendmmsg() as the kernel runs it: one sendmsg per entry until one fails; the count
 * sent if any, otherwise the error. */
SMC_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	for (unsigned int i = 0; vec && i < vlen; i++)
		if (vec[i].msg_hdr.msg_controllen)
			KEEP_ERRNO(smc_sock_before_fd_pass(&vec[i].msg_hdr));
	if (!kind_is_sock(fdtab_kind(fd)))
		return REAL(sendmmsg)(fd, vec, vlen, flags);
	if (vlen > SMC_UIO_MAXIOV)
		vlen = SMC_UIO_MAXIOV;
	unsigned int done = 0;
	while (done < vlen) {
		ssize_t sent = sendmsg_tracked(fd, &vec[done].msg_hdr, flags);
		if (sent < 0)
			return done > 0 ? (int)done : -1;
		vec[done++].msg_len = (unsigned int)sent;
	}
	return (int)done;
}
int smc_impl_sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
	SMC_INTERNAL_ALIAS(sendmmsg);

/* ------------------------------------------------------------------ sendfile, splice */

#define SENDFILE_BOUNCE (128 * 1024)

/*
 * sendfile() to a tracked socket: the data must go through the core, so it is read
 * into a bounce buffer and sent. With an offset pointer the file position is left
 * alone (pread) and *offset advances by what was sent; without one the file position
 * advances by exactly what was sent, as the kernel's does. A non-seekable in_fd
 * (a pipe) is read with read(); a short send then loses the unsent tail, which the
 * kernel would not, so for those the whole chunk is pushed before returning.
 */
static ssize_t sendfile_tracked(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	struct stat st;
	int fl = REAL(fcntl)(in_fd, F_GETFL);

	/* the kernel's order (do_sendfile): in_fd open for reading (EBADF), then a regular
	 * file or a block device (splice_direct_to_actor: a socket or a pipe is EINVAL),
	 * before anything is read */
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || fstat(in_fd, &st) < 0) {
		errno = EBADF;
		return -1;
	}
	if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
		errno = EINVAL;
		return -1;
	}

	off64_t pos = offset ? *offset : lseek64(in_fd, 0, SEEK_CUR);
	bool seekable = offset || pos >= 0;

	if (offset && pos < 0) {
		errno = EINVAL;
		return -1;
	}
	if (count > SMC_MAX_RW_COUNT)
		count = SMC_MAX_RW_COUNT;
	size_t bounce_len = count < SENDFILE_BOUNCE ? count : SENDFILE_BOUNCE;
	char *bounce = malloc(bounce_len ? bounce_len : 1);
	if (!bounce) {
		errno = ENOMEM;
		return -1;
	}

	size_t total = 0;
	int err = 0;
	while (total < count) {
		size_t want = count - total < bounce_len ? count - total : bounce_len;
		ssize_t got = seekable ? pread64(in_fd, bounce, want, pos)
				       : REAL(read)(in_fd, bounce, want);
		if (got <= 0) {
			err = got < 0 ? errno : 0;
			break;
		}
		size_t chunk_sent = 0;
		while (chunk_sent < (size_t)got) {
			struct iovec iov = { bounce + chunk_sent, (size_t)got - chunk_sent };
			ssize_t sent = smc_sock_send(out_fd, &iov, 1, 0);
			if (sent <= 0) {
				err = sent < 0 ? errno : 0;
				break;
			}
			chunk_sent += (size_t)sent;
			if (seekable)
				break; /* the unsent rest stays in the file for the next call */
		}
		total += chunk_sent;
		pos += (off64_t)chunk_sent;
		if (err || chunk_sent < (size_t)got)
			break;
	}
	free(bounce);

	if (offset)
		*offset = pos;
	else if (seekable && total > 0)
		lseek64(in_fd, pos, SEEK_SET);
	if (total == 0 && err) {
		errno = err;
		return -1;
	}
	return (ssize_t)total;
}

SMC_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	if (!kind_is_sock(fdtab_kind(out_fd)))
		return REAL(sendfile)(out_fd, in_fd, offset, count);
	if (!offset)
		return sendfile_tracked(out_fd, in_fd, NULL, count);
	off64_t off = *offset;
	ssize_t ret = sendfile_tracked(out_fd, in_fd, &off, count);
	*offset = (off_t)off;
	return ret;
}

SMC_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	if (!kind_is_sock(fdtab_kind(out_fd)))
		return CALL_REAL(sendfile64, out_fd, in_fd, offset, count);
	return sendfile_tracked(out_fd, in_fd, offset, count);
}
ssize_t smc_impl_sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
	SMC_INTERNAL_ALIAS(sendfile64);

/*
 * splice() on an upgraded connection. The kernel would move bytes between the pipe
 * and the TCP socket's buffers, where an SMC connection's data never is, so the bytes
 * go through a bounce buffer and the core instead. splice needs a pipe on one side;
 * SPLICE_F_NONBLOCK or O_NONBLOCK on the pipe make it fail with EAGAIN instead of
 * waiting. Once bytes have been taken from one side they are always delivered to the
 * other (waiting if needed), so nothing is lost in the middle.
 */
#define SPLICE_BOUNCE (64 * 1024)

static bool fd_is_pipe(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static bool splice_nonblocking(int pipe_fd, unsigned int flags)
{
	int fl = REAL(fcntl)(pipe_fd, F_GETFL);
	return (flags & SPLICE_F_NONBLOCK) || (fl >= 0 && (fl & O_NONBLOCK));
}

/* Waits (kernel poll: the pipe is not ours) until fd reports one of events. */
static short wait_plain_fd(int fd, short events, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;
	do {
		n = REAL(poll)(&p, 1, timeout_ms);
	} while (n < 0 && errno == EINTR);
	return n > 0 ? p.revents : 0;
}

/* Writes all of buf to a pipe, waiting for room even on a nonblocking pipe: the bytes
 * were already taken from the connection. */
static void pipe_write_all(int pipe_fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = REAL(write)(pipe_fd, buf, n);
		if (w > 0) {
			buf += w;
			n -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			wait_plain_fd(pipe_fd, POLLOUT, -1);
		} else {
			return; /* reader gone: the kernel would have lost them too (EPIPE) */
		}
	}
}

static ssize_t splice_smc_to_pipe(int sock, int pipe_out, size_t len, unsigned int flags)
{
	if (!fd_is_pipe(pipe_out)) {
		errno = EINVAL;
		return -1;
	}
	if (len == 0)
		return 0;
	bool nonblock = splice_nonblocking(pipe_out, flags);
	int cap = REAL(fcntl)(pipe_out, F_GETPIPE_SZ), used = 0;
	REAL(ioctl)(pipe_out, FIONREAD, &used);
	if (cap > 0 && used >= cap) {
		if (nonblock) {
			errno = EAGAIN;
			return -1;
		}
		wait_plain_fd(pipe_out, POLLOUT, -1);
		REAL(ioctl)(pipe_out, FIONREAD, &used);
	}
	size_t room = cap > used ? (size_t)(cap - used) : 1;
	size_t want = len < room ? len : room;
	if (want > SPLICE_BOUNCE)
		want = SPLICE_BOUNCE;
	char *buf = malloc(want);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	struct iovec iov = { .iov_base = buf, .iov_len = want };
	/* whether to wait for the socket's data is the socket's own O_NONBLOCK, as in
	 * tcp_splice_read: SPLICE_F_NONBLOCK and the pipe's flag concern the pipe */
	ssize_t got = smc_sock_recv(sock, &iov, 1, 0);
	if (got > 0)
		KEEP_ERRNO(pipe_write_all(pipe_out, buf, (size_t)got));
	free(buf);
	return got;
}

/* Sends all of buf, waiting for room through the core when the socket is nonblocking. */
static ssize_t smc_send_all(int sock, const char *buf, size_t n, int msg_flags)
{
	size_t done = 0;
	while (done < n) {
		struct iovec iov = { .iov_base = (void *)(buf + done), .iov_len = n - done };
		ssize_t sent = smc_sock_send(sock, &iov, 1, msg_flags);
		if (sent > 0) {
			done += (size_t)sent;
		} else if (sent < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd p = { .fd = sock, .events = POLLOUT };
			smc_poll(&p, 1, NULL, NULL);
		} else {
			break;
		}
	}
	return done > 0 ? (ssize_t)done : -1;
}

static ssize_t splice_pipe_to_smc(int pipe_in, int sock, size_t len, unsigned int flags)
{
	if (!fd_is_pipe(pipe_in)) {
		errno = EINVAL;
		return -1;
	}
	if (len == 0)
		return 0;
	if (splice_nonblocking(pipe_in, flags)) {
		short ev = wait_plain_fd(pipe_in, POLLIN, 0);
		if (!(ev & POLLIN)) {
			if (ev & POLLHUP)
				return 0; /* empty pipe without writers */
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = { .fd = sock, .events = POLLOUT };
		if (smc_poll(&p, 1, &(struct timespec){ 0, 0 }, NULL) <= 0 || !(p.revents & POLLOUT)) {
			errno = EAGAIN;
			return -1;
		}
	}
	size_t want = len < SPLICE_BOUNCE ? len : SPLICE_BOUNCE;
	char *buf = malloc(want);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t got = REAL(read)(pipe_in, buf, want);
	if (got > 0)
		got = smc_send_all(sock, buf, (size_t)got, (flags & SPLICE_F_MORE) ? MSG_MORE : 0);
	free(buf);
	return got;
}

SMC_EXPORT ssize_t splice(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out,
			  size_t len, unsigned int flags)
{
	bool smc_in = fdtab_kind(fd_in) == FD_SMC, smc_out = fdtab_kind(fd_out) == FD_SMC;

	if (!smc_in && !smc_out)
		return REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
	if (smc_in && smc_out) {
		errno = EINVAL; /* no pipe on either side */
		return -1;
	}
	if (off_in || off_out) {
		errno = ESPIPE; /* neither a pipe nor a socket has a position */
		return -1;
	}
	return smc_in ? splice_smc_to_pipe(fd_in, fd_out, len, flags)
		      : splice_pipe_to_smc(fd_in, fd_out, len, flags);
}
ssize_t smc_impl_splice(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out, size_t len,
			unsigned int flags) SMC_INTERNAL_ALIAS(splice);

/* ------------------------------------------------------------------ stdio */

/* A FILE reads and writes its descriptor with libc's internal calls, which no wrapper
 * sees (core: smc_sock_before_stdio). */
SMC_EXPORT FILE *fdopen(int fd, const char *mode)
{
	if (fdtab_kind(fd) == FD_SMC)
		KEEP_ERRNO(smc_sock_before_stdio(fd));
	if (!REAL(fdopen)) {
		errno = ENOSYS;
		return NULL;
	}
	return REAL(fdopen)(fd, mode);
}
