//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// xrnic XDP steering program. See doc.go for the contract; in short:
// frames carrying IPv4/TCP whose destination port is in listen_ports or
// whose 4-tuple is in flows are redirected to the AF_XDP socket of the
// receive queue (xsks[rx_queue_index]); everything else is XDP_PASS.
// Every frame is counted under exactly one verdict.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

#define IPPROTO_TCP_ 6
#define IP_MF_OFFSET 0x3fff /* More Fragments flag and fragment offset */
#define PPM 1000000ULL

// Header layouts with byte-sized bit fields, so the program does not depend
// on the host's bitfield endianness headers.
struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct ipv4_hdr {
	__u8 version_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct tcp_hdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;
	__u8 flags;
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

// flow4 is the key of the flows map: a connected 4-tuple seen from this
// host, all fields in network byte order.
struct flow4 {
	__be32 local_ip;
	__be32 remote_ip;
	__be16 local_port;
	__be16 remote_port;
};

// counters is the per-CPU verdict tally. Every frame increments exactly one
// of the first five fields; fault_corrupted additionally counts frames that
// were corrupted and then redirected or passed.
struct counters {
	__u64 redirected;
	__u64 passed;
	__u64 malformed;
	__u64 no_socket;
	__u64 fault_dropped;
	__u64 fault_corrupted;
};

// fault configures fault injection on steered frames, in parts per million.
// All zero (the default) disables it.
struct fault {
	__u32 drop_ppm;
	__u32 corrupt_ppm;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __be16);
	__type(value, __u8);
} listen_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow4);
	__type(value, __u8);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault);
} faults SEC(".maps");

static __always_inline int chance(__u32 ppm)
{
	return (((__u64)bpf_get_prandom_u32() * PPM) >> 32) < ppm;
}

// corrupt flips one byte of the TCP payload, at a random position when that
// position lies in the first buffer, else at its first byte, or the low byte
// of the TCP checksum when there is no payload in the first buffer.
static __always_inline void corrupt(void *end, struct tcp_hdr *tcp,
				    __u8 *payload, __u32 payload_len)
{
	if (payload_len > 0) {
		__u32 off = bpf_get_prandom_u32() % payload_len;
		// The first buffer is at most a page: the bound lets the
		// verifier track p (packet offsets must stay below 64 KiB).
		if (off < 0x4000) {
			__u8 *p = payload + off;
			if ((void *)(p + 1) <= end) {
				*p ^= 0xff;
				return;
			}
		}
		if ((void *)(payload + 1) <= end) {
			*payload ^= 0xff;
			return;
		}
	}
	((__u8 *)&tcp->check)[1] ^= 0xff;
}

SEC("xdp.frags")
int xrnic_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;

	struct counters *c = bpf_map_lookup_elem(&stats, &zero);
	if (!c)
		return XDP_PASS; // cannot happen: a one-entry array

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		goto malformed;
	__be16 proto = eth->h_proto;
	__u32 l3off = sizeof(*eth);
	if (proto == bpf_htons(ETH_P_8021Q)) {
		// One 802.1Q tag, as wire/eth understands; stacked tags
		// (0x88a8) are not ours and pass below.
		struct vlan_hdr *vlan = (void *)(eth + 1);
		if ((void *)(vlan + 1) > end)
			goto malformed;
		proto = vlan->proto;
		l3off += sizeof(*vlan);
	}
	if (proto != bpf_htons(ETH_P_IP))
		goto pass;

	struct ipv4_hdr *ip = data + l3off;
	if ((void *)(ip + 1) > end)
		goto malformed;
	if ((ip->version_ihl >> 4) != 4)
		goto malformed;
	__u32 ihl = (ip->version_ihl & 0x0f) * 4;
	if (ihl < sizeof(*ip))
		goto malformed;
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot < ihl)
		goto malformed;
	if (ip->frag_off & bpf_htons(IP_MF_OFFSET))
		goto pass; // fragments: the kernel reassembles
	if (ip->protocol != IPPROTO_TCP_)
		goto pass;

	struct tcp_hdr *tcp = (void *)ip + ihl;
	if ((void *)(tcp + 1) > end)
		goto malformed;
	__u32 doff = (tcp->doff_res >> 4) * 4;
	if (doff < sizeof(*tcp) || tot < ihl + doff)
		goto malformed;
	if ((void *)tcp + doff > end)
		goto malformed;

	if (!bpf_map_lookup_elem(&listen_ports, &tcp->dest)) {
		struct flow4 key = {
			.local_ip = ip->daddr,
			.remote_ip = ip->saddr,
			.local_port = tcp->dest,
			.remote_port = tcp->source,
		};
		if (!bpf_map_lookup_elem(&flows, &key))
			goto pass;
	}

	// Steered. Fault injection first, so that it also works (and can be
	// tested) without a socket.
	struct fault *f = bpf_map_lookup_elem(&faults, &zero);
	if (f) {
		if (f->drop_ppm && chance(f->drop_ppm)) {
			c->fault_dropped++;
			return XDP_DROP;
		}
		if (f->corrupt_ppm && chance(f->corrupt_ppm)) {
			corrupt(end, tcp, (__u8 *)tcp + doff, tot - ihl - doff);
			c->fault_corrupted++;
		}
	}

	__u32 queue = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &queue)) {
		c->no_socket++;
		return XDP_PASS;
	}
	// The lower bits of flags are the action when the entry vanished
	// since the lookup above: hand the frame to the kernel.
	int action = bpf_redirect_map(&xsks, queue, XDP_PASS);
	if (action == XDP_REDIRECT)
		c->redirected++;
	else
		c->no_socket++;
	return action;

pass:
	c->passed++;
	return XDP_PASS;
malformed:
	c->malformed++;
	return XDP_PASS;
}
