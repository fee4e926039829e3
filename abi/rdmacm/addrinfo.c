/*
 * addrinfo.c: rdma_getaddrinfo and rdma_freeaddrinfo over getaddrinfo(3),
 * for the iWARP port space (RDMA_PS_TCP, RC QPs): no route or connect
 * data, one result. Name failures return getaddrinfo's EAI_* code (as
 * rdma-core does, for gai_strerror); other failures -1 with errno.
 */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t len, socklen_t *out)
{
	struct sockaddr *c;

	if (!sa || !len)
		return NULL;
	c = calloc(1, len);
	if (c) {
		memcpy(c, sa, len);
		*out = len;
	}
	return c;
}

XAPI void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

XAPI int rdma_getaddrinfo(const char *node, const char *service,
			  const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo gh, *ai = NULL, *a;
	struct rdma_addrinfo *r;
	int flags = hints ? hints->ai_flags : 0, passive = flags & RAI_PASSIVE, ret;

	if (!res)
		return xfail(EINVAL);
	*res = NULL;
	if (hints && hints->ai_family && hints->ai_family != AF_INET &&
	    hints->ai_family != AF_INET6) {
		errno = EAFNOSUPPORT;
		return EAI_FAMILY;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return xfail(ENOMEM);
	r->ai_flags = flags;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
			: r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (node || service) {
		memset(&gh, 0, sizeof(gh));
		gh.ai_family = hints ? hints->ai_family : AF_UNSPEC;
		gh.ai_socktype = SOCK_STREAM;
		gh.ai_protocol = IPPROTO_TCP;
		gh.ai_flags = (passive ? AI_PASSIVE : 0) |
			      (flags & RAI_NUMERICHOST ? AI_NUMERICHOST : 0);
		ret = getaddrinfo(node, service, &gh, &ai);
		if (ret) {
			free(r);
			if (ret != EAI_SYSTEM)
				errno = ret == EAI_MEMORY ? ENOMEM : EADDRNOTAVAIL;
			return ret;
		}
		for (a = ai; a; a = a->ai_next)
			if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
				break;
		if (!a) {
			freeaddrinfo(ai);
			free(r);
			errno = EADDRNOTAVAIL;
			return EAI_FAMILY;
		}
		r->ai_family = a->ai_family;
		if (passive)
			r->ai_src_addr = dup_addr(a->ai_addr, a->ai_addrlen, &r->ai_src_len);
		else
			r->ai_dst_addr = dup_addr(a->ai_addr, a->ai_addrlen, &r->ai_dst_len);
		freeaddrinfo(ai);
		if (!r->ai_src_addr && !r->ai_dst_addr)
			goto nomem;
	} else if (!hints || (!hints->ai_src_addr && !hints->ai_dst_addr)) {
		free(r);
		errno = EINVAL;
		return EAI_NONAME;
	}
	/* The addresses the caller gave that the name did not fill. */
	if (hints && hints->ai_src_addr && hints->ai_src_len && !r->ai_src_addr) {
		r->ai_src_addr = dup_addr(hints->ai_src_addr, hints->ai_src_len, &r->ai_src_len);
		if (!r->ai_src_addr)
			goto nomem;
		if (!r->ai_family)
			r->ai_family = hints->ai_src_addr->sa_family;
	}
	if (hints && hints->ai_dst_addr && hints->ai_dst_len && !r->ai_dst_addr && !passive) {
		r->ai_dst_addr = dup_addr(hints->ai_dst_addr, hints->ai_dst_len, &r->ai_dst_len);
		if (!r->ai_dst_addr)
			goto nomem;
		if (!r->ai_family)
			r->ai_family = hints->ai_dst_addr->sa_family;
	}
	*res = r;
	return 0;
nomem:
	rdma_freeaddrinfo(r);
	return xfail(ENOMEM);
}
