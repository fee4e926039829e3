package main

import "testing"

func TestPeerQPs(t *testing.T) {
	var p peerQPs
	r1, ok1 := p.acquire("127.0.0.1:1000", 2)
	_, ok2 := p.acquire("127.0.0.1:1001", 2)
	_, ok3 := p.acquire("[::ffff:127.0.0.1]:1002", 2) // the same address, v4-mapped
	_, ok4 := p.acquire("127.0.0.2:1000", 2)
	if !ok1 || !ok2 || ok3 || !ok4 {
		t.Fatalf("acquire: %v %v %v %v; want true true false true", ok1, ok2, ok3, ok4)
	}
	r1()
	if _, ok := p.acquire("127.0.0.1:1003", 2); !ok {
		t.Fatal("a released QP did not make room")
	}
	for i := 0; i < 100; i++ {
		if _, ok := p.acquire("10.9.9.9:1", 0); !ok {
			t.Fatal("max 0 must not limit")
		}
	}
}
