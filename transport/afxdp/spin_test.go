package afxdp

import (
	"testing"
	"time"
)

// The idle spin stops after spinLostMax lost turns close together, only
// for turns of the current spin, and resumes after spinCalm.
func TestSpinGuard(t *testing.T) {
	us := time.Microsecond
	var g spinGuard
	last := 100 * us // the loop's last work
	// A turn that started before the last work is not this spin's.
	g.prev = 90 * us
	g.check(200*us, last)
	g.prev = 200 * us
	if g.check(200*us+spinLostTurn+us, last) {
		t.Fatal("a turn from before the last work counted as lost")
	}
	g = spinGuard{}
	// Short turns never count.
	for now := 101 * us; now < 150*us; now += us {
		g.prev = now - us/2
		if g.check(now, last) {
			t.Fatalf("a %v turn stopped the spin", us/2)
		}
	}
	// One lost turn is not enough...
	g.prev = 150 * us
	if g.check(150*us+spinLostTurn+us, last) {
		t.Fatal("one lost turn stopped the spin")
	}
	// ...a second far later starts the count again...
	g.prev = 150*us + spinLostWindow + time.Millisecond
	if g.check(g.prev+spinLostTurn+us, last) {
		t.Fatal("two lost turns further apart than spinLostWindow stopped the spin")
	}
	// ...a second soon after stops it.
	g.prev += time.Millisecond
	now := g.prev + 3*spinLostTurn
	if !g.check(now, last) {
		t.Fatal("spinLostMax lost turns in a row did not stop the spin")
	}
	if g.may(now) || g.may(now+spinCalm-us) {
		t.Fatal("the loop may spin while calm")
	}
	if !g.may(now + spinCalm) {
		t.Fatal("the spin did not resume after spinCalm")
	}
}
