package tcpstack

import "time"

// timerHeap is a binary min-heap of connections by deadline. A connection
// with no armed timer is not in the heap.
type timerHeap []*Conn

func (h timerHeap) next() time.Duration {
	if len(h) == 0 {
		return NoDeadline
	}
	return h[0].deadline
}

func (h timerHeap) peek() *Conn {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

func (h *timerHeap) update(c *Conn) {
	switch {
	case c.heapIdx < 0 && c.deadline == NoDeadline:
	case c.heapIdx < 0:
		c.heapIdx = len(*h)
		*h = append(*h, c)
		h.up(c.heapIdx)
	case c.deadline == NoDeadline:
		h.remove(c)
	default:
		if !h.down(c.heapIdx) {
			h.up(c.heapIdx)
		}
	}
}

func (h *timerHeap) remove(c *Conn) {
	i := c.heapIdx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	c.heapIdx = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].deadline <= h[i].deadline {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h timerHeap) down(i int) bool {
	i0 := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].deadline < h[l].deadline {
			m = r
		}
		if h[i].deadline <= h[m].deadline {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > i0
}
