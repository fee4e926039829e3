/*
 * rsocket.c: rsockets are not implemented by xrnic: every call fails with
 * ENOSYS, except rpoll and rselect. Since no descriptor can be an
 * rsocket, those see only ordinary fds and are exactly poll(2) and
 * select(2) (librdmacm's examples, rping and ucmatose among them, call
 * rpoll on the CM channel's fd through common.c).
 */
#include <poll.h>
#include <sys/select.h>
#include <rdma/rsocket.h>

#include "internal.h"

static int none(void)
{
	xcm_say("rsockets (rsocket, rconnect, ...) are not supported by xrnic; "
		"use the rdma_cm and verbs APIs");
	return xfail(ENOSYS);
}

XAPI int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

XAPI int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		 struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

XAPI int rsocket(int domain, int type, int protocol) { return none(); }
XAPI int rbind(int s, const struct sockaddr *addr, socklen_t len) { return none(); }
XAPI int rlisten(int s, int backlog) { return none(); }
XAPI int raccept(int s, struct sockaddr *addr, socklen_t *len) { return none(); }
XAPI int rconnect(int s, const struct sockaddr *addr, socklen_t len) { return none(); }
XAPI int rshutdown(int s, int how) { return none(); }
XAPI int rclose(int s) { return none(); }
XAPI ssize_t rrecv(int s, void *buf, size_t len, int flags) { return none(); }
XAPI ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src,
		       socklen_t *srclen) { return none(); }
XAPI ssize_t rrecvmsg(int s, struct msghdr *msg, int flags) { return none(); }
XAPI ssize_t rsend(int s, const void *buf, size_t len, int flags) { return none(); }
XAPI ssize_t rsendto(int s, const void *buf, size_t len, int flags,
		     const struct sockaddr *dst, socklen_t dstlen) { return none(); }
XAPI ssize_t rsendmsg(int s, const struct msghdr *msg, int flags) { return none(); }
XAPI ssize_t rread(int s, void *buf, size_t count) { return none(); }
XAPI ssize_t rreadv(int s, const struct iovec *iov, int iovcnt) { return none(); }
XAPI ssize_t rwrite(int s, const void *buf, size_t count) { return none(); }
XAPI ssize_t rwritev(int s, const struct iovec *iov, int iovcnt) { return none(); }
XAPI int rgetpeername(int s, struct sockaddr *addr, socklen_t *len) { return none(); }
XAPI int rgetsockname(int s, struct sockaddr *addr, socklen_t *len) { return none(); }
XAPI int rsetsockopt(int s, int level, int optname, const void *optval,
		     socklen_t optlen) { return none(); }
XAPI int rgetsockopt(int s, int level, int optname, void *optval,
		     socklen_t *optlen) { return none(); }
XAPI int rfcntl(int s, int cmd, ...) { return none(); }
XAPI off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	return none();
}
XAPI int riounmap(int s, void *buf, size_t len) { return none(); }
XAPI size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	none();
	return (size_t)-1;
}
