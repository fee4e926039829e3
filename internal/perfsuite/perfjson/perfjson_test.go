package perfjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONKeys(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, map[string]any{"test": "x"}, []any{BWResult{Size: 2, Iters: 5, Peak: 1, Average: 2, MsgRate: 3}}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"} {
		if _, ok := doc.Results[k]; !ok {
			t.Errorf("bw JSON lacks %q: %s", k, buf.String())
		}
	}
	buf.Reset()
	Write(&buf, nil, []any{LatResult{}, LatResult{}})
	var lat struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &lat); err != nil || len(lat.Results) != 2 {
		t.Fatalf("lat JSON: %v %s", err, buf.String())
	}
	for _, k := range []string{"MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"} {
		if _, ok := lat.Results[0][k]; !ok {
			t.Errorf("lat JSON lacks %q", k)
		}
	}
}

// Rows reads back what Write wrote, for one size and for several, and
// the Key constants name fields of the rows.
func TestRows(t *testing.T) {
	var one, many bytes.Buffer
	Write(&one, nil, []any{BWResult{Size: 64, Average: 2.5, MsgRate: 0.5}})
	Write(&many, nil, []any{LatResult{Size: 2, Typical: 1.5, P99: 3, P999: 4}, LatResult{Size: 4}})
	r, err := Rows(one.Bytes())
	if err != nil || len(r) != 1 || r[0][KeySize] != 64.0 || r[0][KeyBWAverage] != 2.5 || r[0][KeyMsgRate] != 0.5 {
		t.Fatalf("one size: %v %v", r, err)
	}
	r, err = Rows(many.Bytes())
	if err != nil || len(r) != 2 || r[0][KeyTypical] != 1.5 || r[0][KeyP99] != 3.0 || r[0][KeyP999] != 4.0 || r[1][KeySize] != 4.0 {
		t.Fatalf("two sizes: %v %v", r, err)
	}
	if _, err := Rows([]byte("{")); err == nil {
		t.Fatal("no error for a broken document")
	}
}
