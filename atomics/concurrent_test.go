package atomics

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// iters scales the concurrent tests down under -short.
func iters(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

func workers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// overcommit runs more Ps than CPUs for the duration of a test: the kernel
// and Go's async preemption then suspend threads at arbitrary instructions,
// including between a load and its CAS, even on a machine with few cores.
func overcommit(t *testing.T) {
	prev := runtime.GOMAXPROCS(max(8, 2*runtime.NumCPU()))
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

// gate starts goroutines together so that they really overlap.
type gate chan struct{}

func (g gate) wait() { <-g }
func (g gate) open() { close(g) }

// paddedWord keeps a word on its own cache line.
type paddedWord struct {
	_ [64]byte
	v uint64
	_ [56]byte
}

// TestConcurrentFetchAdd mixes masked FetchAdd, unmasked FetchAdd and direct
// atomic.AddUint64 on the same words; the final values are exact.
func TestConcurrentFetchAdd(t *testing.T) {
	overcommit(t)
	n := iters(100000)
	g := workers()
	// Word A: two 32-bit fields. Masked FetchAdd adds 1 to each field;
	// FetchAdd mask 0 adds 1<<32 (only the high field: its carry out of
	// bit 63 is lost either way); atomic.AddUint64 adds 1 (low field; the
	// low field never reaches 2^32, so no carry crosses bit 31).
	// Word B: eight 8-bit fields that wrap many times. Masked FetchAdd adds
	// i+1 to byte i for i < 7; atomic.AddUint64 and FetchAdd mask 0 add to
	// the top byte only (1<<56 and 3<<56), whose carry out of bit 63 is lost.
	// Word C: masked FetchAdd of 1 on the low field with mask 1<<63 (the
	// only field MSB is bit 63): a counter through the masked path, whose
	// returned originals must all be distinct.
	var a, b, c paddedWord
	seen := make([][]uint64, g)
	var wg sync.WaitGroup
	start := make(gate)
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for range n {
				switch w % 3 {
				case 0:
					FetchAdd(&a.v, 0x0000000100000001, 0x8000000080000000)
					FetchAdd(&b.v, 0x0007060504030201, 0x8080808080808080)
				case 1:
					FetchAdd(&a.v, 1<<32, 0)
					FetchAdd(&b.v, 3<<56, 0)
				case 2:
					atomic.AddUint64(&a.v, 1)
					atomic.AddUint64(&b.v, 1<<56)
				}
				seen[w] = append(seen[w], FetchAdd(&c.v, 1, 1<<63))
			}
		}()
	}
	start.open()
	wg.Wait()
	var cnt [3]uint64
	for w := range g {
		cnt[w%3] += uint64(n)
	}
	wantA := (cnt[0]+cnt[1])<<32 | (cnt[0] + cnt[2])
	if got := atomic.LoadUint64(&a.v); got != wantA {
		t.Errorf("word A = %#016x, want %#016x", got, wantA)
	}
	var wantB uint64
	for i := range 7 {
		wantB |= (uint64(i+1) * cnt[0] & 0xFF) << (8 * i)
	}
	wantB |= ((3*cnt[1] + cnt[2]) & 0xFF) << 56
	if got := atomic.LoadUint64(&b.v); got != wantB {
		t.Errorf("word B = %#016x, want %#016x", got, wantB)
	}
	total := uint64(g * n)
	if got := atomic.LoadUint64(&c.v); got != total {
		t.Errorf("word C = %d, want %d", got, total)
	}
	dup := make([]bool, total)
	for _, s := range seen {
		for _, o := range s {
			if o >= total || dup[o] {
				t.Fatalf("masked FetchAdd returned %d twice or out of range (lost atomicity)", o)
			}
			dup[o] = true
		}
	}
}

// TestConcurrentUnmaskedCmpSwapCounter increments a counter with a
// CmpSwap(all-ones) loop from many goroutines. Every failure must return an
// original that really differs from the compare value.
func TestConcurrentUnmaskedCmpSwapCounter(t *testing.T) {
	overcommit(t)
	n := iters(100000)
	g := workers()
	var w paddedWord
	var fails atomic.Uint64
	var wg sync.WaitGroup
	start := make(gate)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for range n {
				o := atomic.LoadUint64(&w.v)
				for {
					orig, ok := CmpSwap(&w.v, o, ^uint64(0), o+1, ^uint64(0))
					if ok != (orig == o) {
						t.Errorf("CmpSwap(cmp %d) = %d, %v: outcome disagrees with the returned original", o, orig, ok)
						return
					}
					if ok {
						break
					}
					fails.Add(1)
					o = orig
				}
			}
		}()
	}
	start.open()
	wg.Wait()
	if got, want := atomic.LoadUint64(&w.v), uint64(g*n); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
	t.Logf("%d failed CmpSwaps retried", fails.Load())
}

// TestSpinlock uses masked CmpSwap on bit 0 as a lock protecting a plain
// counter while other goroutines keep changing bits 8..63 of the same word
// with atomic.AddUint64 (the masked CAS must tolerate them).
func TestSpinlock(t *testing.T) {
	overcommit(t)
	n := iters(20000)
	g := workers()
	const lockBit = 1
	var w paddedWord
	var holders atomic.Int32
	var counter int // protected by the lock; plain on purpose
	var stop atomic.Bool
	var noise atomic.Uint64
	var noiseWG, wg sync.WaitGroup
	start := make(gate)
	for range 2 {
		noiseWG.Add(1)
		go func() {
			defer noiseWG.Done()
			for !stop.Load() {
				atomic.AddUint64(&w.v, 1<<8)
				noise.Add(1)
				runtime.Gosched()
			}
		}()
	}
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for range n {
				for {
					orig, ok := CmpSwap(&w.v, 0, lockBit, lockBit, lockBit)
					if ok != (orig&lockBit == 0) {
						t.Errorf("lock: orig %#x, match %v", orig, ok)
						return
					}
					if ok {
						break
					}
					runtime.Gosched()
				}
				if h := holders.Add(1); h != 1 {
					t.Errorf("lock held by %d goroutines", h)
				}
				counter++
				holders.Add(-1)
				if orig, ok := CmpSwap(&w.v, lockBit, lockBit, 0, lockBit); !ok || orig&lockBit == 0 {
					t.Errorf("unlock of a lock not held: orig %#x, match %v", orig, ok)
				}
			}
		}()
	}
	start.open()
	wg.Wait()
	stop.Store(true)
	noiseWG.Wait()
	if counter != g*n {
		t.Errorf("counter = %d, want %d", counter, g*n)
	}
	if got, want := atomic.LoadUint64(&w.v), noise.Load()<<8; got != want {
		t.Errorf("lock word = %#x, want %#x (noise %d, lock bit clear)", got, want, noise.Load())
	}
}

// TestOwnedBytes gives each of 8 goroutines one byte of a word; each does
// masked CmpSwap (compare and swap its byte only) to count its byte up. Since
// nobody else writes that byte, every CmpSwap must match, and no goroutine
// may ever see its byte disturbed. A reader goroutine meanwhile exercises the
// non-writing paths (FetchAdd of 0, CmpSwap with swap mask 0).
func TestOwnedBytes(t *testing.T) {
	overcommit(t)
	n := iters(100000)
	var w paddedWord
	var wg sync.WaitGroup
	start := make(gate)
	var done atomic.Bool
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			shift := uint(8 * i)
			m := uint64(0xFF) << shift
			var mine uint64
			for range n {
				orig, ok := CmpSwap(&w.v, mine<<shift, m, (mine+1)<<shift, m)
				if !ok || (orig&m)>>shift != mine {
					t.Errorf("byte %d: expected %#x, CmpSwap returned orig %#x match %v", i, mine, orig, ok)
					return
				}
				mine = (mine + 1) & 0xFF
			}
		}()
	}
	var readerWG sync.WaitGroup
	readerWG.Add(1)
	go func() {
		defer readerWG.Done()
		for !done.Load() {
			o := FetchAdd(&w.v, 0, 0x8080808080808080)
			// swapMask 0: never writes, whatever the compare says.
			if orig, ok := CmpSwap(&w.v, o, ^uint64(0), 0xDEAD, 0); ok != (orig == o) {
				t.Errorf("reader: CmpSwap(cmp %#x) returned orig %#x match %v", o, orig, ok)
			}
			if _, ok := CmpSwap(&w.v, 0xDEAD, 0, 0xBEEF, 0); !ok {
				t.Errorf("reader: compare mask 0 did not match")
			}
			runtime.Gosched()
		}
	}()
	start.open()
	wg.Wait()
	done.Store(true)
	readerWG.Wait()
	var want uint64
	for i := range 8 {
		want |= (uint64(n) & 0xFF) << (8 * i)
	}
	if got := atomic.LoadUint64(&w.v); got != want {
		t.Errorf("word = %#016x, want %#016x", got, want)
	}
}

// TestCmpSwapOutcomeMatchesOrig flips a word between 0 and 1 with plain
// atomic stores while other goroutines CmpSwap against 0 with full and
// partial masks. Whatever the interleaving, the returned original must
// explain the outcome: matched iff ((cmp ^ orig) & cmpMask) == 0. A failed
// full-word CAS followed by a load that sees the word back at cmp must retry,
// not report "no match" with orig == cmp.
func TestCmpSwapOutcomeMatchesOrig(t *testing.T) {
	overcommit(t)
	n := iters(100000)
	var w paddedWord
	var stop atomic.Bool
	var flipWG, wg sync.WaitGroup
	start := make(gate)
	for range 2 {
		flipWG.Add(1)
		go func() {
			defer flipWG.Done()
			start.wait()
			for i := uint64(0); !stop.Load(); i++ {
				atomic.StoreUint64(&w.v, i&1)
			}
		}()
	}
	type op struct{ cmp, cm, swap, sm uint64 }
	ops := []op{
		{0, ^uint64(0), 0, ^uint64(0)},   // exact compare, matching writes 0 (the read path)
		{0, ^uint64(0), 2, ^uint64(0)},   // exact compare, CAS path
		{0, 1, 0, 0},                     // masked compare, never writes
		{0, 3, 0, 4},                     // masked compare, CAS path, writes bit 2 off
		{1, ^uint64(0), 1, ^uint64(0)},   // exact compare against the other value
		{0, ^uint64(0) >> 1, 0, 1 << 40}, // masked, writes a far bit
	}
	for g := range workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for i := range n {
				o := ops[(g+i)%len(ops)]
				orig, ok := CmpSwap(&w.v, o.cmp, o.cm, o.swap, o.sm)
				if want := (o.cmp^orig)&o.cm == 0; ok != want {
					t.Errorf("CmpSwap(%#x, %#x, %#x, %#x) = orig %#x, match %v: inconsistent", o.cmp, o.cm, o.swap, o.sm, orig, ok)
					return
				}
			}
		}()
	}
	start.open()
	wg.Wait()
	stop.Store(true)
	flipWG.Wait()
}
