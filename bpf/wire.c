//go:build ignore

// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// xrnic "faulty wire": a tc (tcx ingress) program that joins two network
// devices back to back, like a cable, and injects faults into the IPv4/TCP
// frames it carries. Test-only. See wire.go and doc.go for the contract;
// in short, every frame that arrives on one attached device is redirected
// to the egress of its partner device, except that a TCP frame may be
//
//   dropped,
//   corrupted by flipping one payload byte (the TCP checksum catches it),
//   corrupted by swapping two 16-bit payload words at even offsets from the
//     TCP header (the ones' complement checksum stays valid, so only the
//     MPA CRC can catch it),
//   duplicated (bpf_clone_redirect, then the original), or
//   held back and released after `gap` later frames of the same direction
//     (reordering, done in the kernel: the held bytes wait in a map slot and
//     ride out in the skb of a later frame, which is first sent on its own
//     as a clone).
//
// Each frame suffers at most one fault, decided in that order. Every frame
// increments exactly one verdict counter of its direction.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

#define IPPROTO_TCP_ 6
#define PPM 1000000ULL
#define TCX_DROP_ 2
#define HOLD_MAX 2048 /* bytes: a 1500-byte MTU frame with room to spare */

enum slot_state { SLOT_EMPTY, SLOT_FILLING, SLOT_FULL, SLOT_DRAINING };

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

// port says where frames arriving on a device go and which direction
// (0 or 1) they count under. Key: the ifindex of the arriving device.
struct port {
	__u32 peer_ifindex;
	__u32 dir;
};

// fault is the fault configuration, in parts per million of TCP
// frames, shared by both directions. gap is how many later frames of the
// same direction a held frame waits for (at least 1).
struct fault {
	__u32 drop_ppm;
	__u32 flip_ppm;
	__u32 swap_ppm;
	__u32 dup_ppm;
	__u32 reorder_ppm;
	__u32 gap;
};

// counters, per direction and per CPU. Every frame increments exactly
// one of frames_other (not IPv4/TCP, forwarded), forwarded (TCP, no fault),
// dropped, flipped, swapped, swap_noop (a swap was drawn but the payload
// had no two different words or was shorter than 4 bytes; forwarded
// unchanged), duplicated, held, or redirect_failed. released counts held
// frames sent out later (each in the skb of a later frame; that frame
// leaves first, as a clone, and counts as forwarded), and hold_lost held
// frames lost because the skb could not be rewritten.
struct counters {
	__u64 frames_other;
	__u64 forwarded;
	__u64 dropped;
	__u64 flipped;
	__u64 swapped;
	__u64 swap_noop;
	__u64 duplicated;
	__u64 held;
	__u64 redirect_failed;
	__u64 released;
	__u64 hold_lost;
};

struct slot {
	__u32 state;
	__u32 len;
	__u32 seen;
	__u32 pad;
	__u8 data[HOLD_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct port);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault);
} wire_faults SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct counters);
} wire_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

static __always_inline int chance(__u32 ppm)
{
	return ppm && (((__u64)bpf_get_prandom_u32() * PPM) >> 32) < ppm;
}

// flip xors one byte of the payload (at a random offset), or the low byte
// of the TCP checksum when there is no payload.
static __always_inline void flip(struct __sk_buff *skb, __u32 l4off, __u32 poff, __u32 plen)
{
	__u32 off = l4off + 17; // low byte of the checksum
	if (plen > 0)
		off = poff + bpf_get_prandom_u32() % plen;
	__u8 b;
	if (bpf_skb_load_bytes(skb, off, &b, 1) < 0)
		return;
	b ^= 0xff;
	bpf_skb_store_bytes(skb, off, &b, 1, 0);
}

// swap exchanges two different 16-bit words of the payload; poff - l4off
// is a multiple of 4, so even payload offsets are even offsets of the TCP
// segment and the checksum does not change. It returns 0 when it found no
// two different words in a few draws.
static __always_inline int swap(struct __sk_buff *skb, __u32 poff, __u32 plen)
{
	__u32 words = plen / 2;
	if (words < 2)
		return 0;
	for (int try = 0; try < 4; try++) {
		__u32 i = bpf_get_prandom_u32() % words;
		__u32 j = bpf_get_prandom_u32() % words;
		if (i == j)
			continue;
		__u16 a, b;
		if (bpf_skb_load_bytes(skb, poff + 2 * i, &a, 2) < 0 ||
		    bpf_skb_load_bytes(skb, poff + 2 * j, &b, 2) < 0)
			return 0;
		if (a == b)
			continue;
		bpf_skb_store_bytes(skb, poff + 2 * i, &b, 2, 0);
		bpf_skb_store_bytes(skb, poff + 2 * j, &a, 2, 0);
		return 1;
	}
	return 0;
}

// hold copies the frame into the direction's slot if it is empty.
static __always_inline int hold(struct __sk_buff *skb, struct slot *s)
{
	__u32 len = skb->len;
	if (len == 0 || len > HOLD_MAX || skb->gso_segs > 1)
		return 0;
	if (__sync_val_compare_and_swap(&s->state, SLOT_EMPTY, SLOT_FILLING) != SLOT_EMPTY)
		return 0;
	if (bpf_skb_load_bytes(skb, 0, s->data, len) < 0) {
		__sync_val_compare_and_swap(&s->state, SLOT_FILLING, SLOT_EMPTY);
		return 0;
	}
	s->len = len;
	s->seen = 0;
	// Publish with an atomic (a full barrier in the JITs) so a releaser
	// on another CPU sees len and data.
	__sync_val_compare_and_swap(&s->state, SLOT_FILLING, SLOT_FULL);
	return 1;
}

// release sends the current frame as a clone, then turns the skb into the
// held frame and returns 1 (the caller redirects the skb). It returns 0
// when the slot is not due or the swap failed (the skb is unchanged then).
static __always_inline int release(struct __sk_buff *skb, struct slot *s,
				   __u32 peer, __u32 gap, struct counters *c)
{
	if (s->state != SLOT_FULL || skb->gso_segs > 1)
		return 0;
	if (__sync_fetch_and_add(&s->seen, 1) + 1 < gap)
		return 0;
	if (__sync_val_compare_and_swap(&s->state, SLOT_FULL, SLOT_DRAINING) != SLOT_FULL)
		return 0;
	__u32 len = s->len;
	if (len == 0 || len > HOLD_MAX) {
		__sync_val_compare_and_swap(&s->state, SLOT_DRAINING, SLOT_EMPTY);
		return 0;
	}
	if (bpf_clone_redirect(skb, peer, 0) != 0) {
		// Try again with the next frame; this one takes its own path.
		__sync_val_compare_and_swap(&s->state, SLOT_DRAINING, SLOT_FULL);
		return 0;
	}
	c->forwarded++; // the current frame, gone as the clone
	if (bpf_skb_change_tail(skb, len, 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, s->data, len, 0) < 0) {
		// The held frame is lost: TCP retransmits it.
		__sync_val_compare_and_swap(&s->state, SLOT_DRAINING, SLOT_EMPTY);
		c->hold_lost++;
		return -1;
	}
	__sync_val_compare_and_swap(&s->state, SLOT_DRAINING, SLOT_EMPTY);
	c->released++;
	return 1;
}

SEC("tcx/ingress")
int xrnic_wire(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct port *p = bpf_map_lookup_elem(&ports, &ifindex);
	if (!p)
		return TCX_DROP_; // not one of ours: attached by mistake
	__u32 dir = p->dir & 1;
	__u32 peer = p->peer_ifindex;
	struct counters *c = bpf_map_lookup_elem(&wire_stats, &dir);
	struct slot *s = bpf_map_lookup_elem(&slots, &dir);
	__u32 zero = 0;
	struct fault *f = bpf_map_lookup_elem(&wire_faults, &zero);
	if (!c || !s || !f)
		return TCX_DROP_;

	// A held frame due now goes out right after this one; the skb then
	// carries the held frame and this frame has left as a clone, so it
	// gets no fault of its own.
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		int r = release(skb, s, peer, f->gap ? f->gap : 1, c);
		if (r > 0)
			return bpf_redirect(peer, 0);
		if (r < 0)
			return TCX_DROP_;
	}

	__u32 ethoff = 0;
	__be16 proto = 0;
	if (bpf_skb_load_bytes(skb, 12, &proto, 2) < 0 || proto != bpf_htons(ETH_P_IP))
		goto other;
	struct ipv4_hdr ip;
	ethoff = sizeof(struct ethhdr);
	if (bpf_skb_load_bytes(skb, ethoff, &ip, sizeof(ip)) < 0)
		goto other;
	if ((ip.version_ihl >> 4) != 4 || ip.protocol != IPPROTO_TCP_ ||
	    (ip.frag_off & bpf_htons(0x3fff)))
		goto other;
	__u32 ihl = (ip.version_ihl & 0x0f) * 4;
	__u32 tot = bpf_ntohs(ip.tot_len);
	__u32 l4off = ethoff + ihl;
	__u8 doff_res;
	if (ihl < 20 || bpf_skb_load_bytes(skb, l4off + 12, &doff_res, 1) < 0)
		goto other;
	__u32 doff = (doff_res >> 4) * 4;
	if (doff < 20 || tot < ihl + doff || ethoff + tot > skb->len)
		goto other;
	__u32 poff = l4off + doff;
	__u32 plen = tot - ihl - doff;

	if (chance(f->drop_ppm)) {
		c->dropped++;
		return TCX_DROP_;
	}
	if (chance(f->flip_ppm)) {
		flip(skb, l4off, poff, plen);
		c->flipped++;
		goto out;
	}
	if (chance(f->swap_ppm)) {
		if (swap(skb, poff, plen))
			c->swapped++;
		else
			c->swap_noop++;
		goto out;
	}
	if (chance(f->dup_ppm)) {
		if (bpf_clone_redirect(skb, peer, 0) == 0) {
			c->duplicated++;
			return bpf_redirect(peer, 0);
		}
		c->redirect_failed++;
		return TCX_DROP_;
	}
	if (chance(f->reorder_ppm) && hold(skb, s)) {
		c->held++;
		return TCX_DROP_;
	}
	c->forwarded++;
	return bpf_redirect(peer, 0);
other:
	c->frames_other++;
	return bpf_redirect(peer, 0);
out:
	return bpf_redirect(peer, 0);
}
