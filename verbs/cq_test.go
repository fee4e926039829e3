package verbs

import (
	"errors"
	"testing"
)

// TestCQSmallerThanQueuesAndResize: a QP's queues may exceed its CQ
// (the CQ grows as posts need it), and Resize reports the size made.
func TestCQSmallerThanQueuesAndResize(t *testing.T) {
	d := openDev(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 384, RQDepth: 384})
	if err != nil {
		t.Fatalf("QP of 384 + 384 on a 1-entry CQ: %v", err)
	}
	if n, err := cq.Resize(100); err != nil || n != 100 || cq.Depth() != 100 {
		t.Fatalf("Resize(100) = %d, %v (depth %d)", n, err, cq.Depth())
	}
	if n, err := cq.Resize(3); err != nil || n != 3 || cq.Depth() != 3 {
		t.Fatalf("Resize(3) = %d, %v (depth %d)", n, err, cq.Depth())
	}
	maxCQE := d.Attributes().MaxCQE
	if _, err := cq.Resize(maxCQE + 1); !errors.Is(err, ErrBadAttr) {
		t.Fatalf("Resize beyond MaxCQE: %v", err)
	}
	if _, err := cq.Resize(0); !errors.Is(err, ErrBadAttr) {
		t.Fatalf("Resize(0): %v", err)
	}
	qp.Close()
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
}
