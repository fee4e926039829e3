package engine

import (
	"testing"

	"xrnic/transport/afxdp"
	"xrnic/transport/kernel"
)

func TestTransportConfig(t *testing.T) {
	if _, err := afxdp.Open(afxdp.Config{}); err == nil {
		t.Error("afxdp without an interface opened")
	}
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.Transport().(kernel.Transport); !ok || d.Attributes().LLP != "kernel" {
		t.Errorf("default transport %T (%q), want kernel", d.Transport(), d.Attributes().LLP)
	}
}
