// Package perfjson is the --out_json document of xrnic-perf, in perftest's
// layout: "test_info" and "results", one object per message size (an
// array of them for several sizes, as with -a). The perftest clone in
// cmd/xrnic-perf writes it; the demo and the sweep in internal/perfsuite
// run the clone as a process and read it back, so the keys live here once.
package perfjson

import (
	"encoding/json"
	"io"
)

// BWResult is one row of a bandwidth report.
type BWResult struct {
	Size    int     `json:"MsgSize"`
	Iters   int     `json:"n_iterations"`
	Peak    float64 `json:"BW_peak"`    // in Unit
	Average float64 `json:"BW_average"` // in Unit
	MsgRate float64 `json:"MsgRate"`    // Mpps
	Unit    string  `json:"unit"`       // "MiB/sec" or "Gb/sec"
}

// LatResult is one row of a latency report, in microseconds.
type LatResult struct {
	Size     int     `json:"MsgSize"`
	Iters    int     `json:"n_iterations"`
	Min      float64 `json:"t_min"`
	Max      float64 `json:"t_max"`
	Typical  float64 `json:"t_typical"`
	Avg      float64 `json:"t_avg"`
	Stdev    float64 `json:"t_stdev"`
	P99      float64 `json:"percentile_99"`
	P999     float64 `json:"percentile_99.9"`
	RTTDiv   int     `json:"rtt_factor"`
	Duration bool    `json:"-"`
	TPS      float64 `json:"tps_average,omitempty"` // duration mode only
}

// Keys of the rows that the demo and the sweep read (the JSON names of
// the fields above).
const (
	KeySize      = "MsgSize"
	KeyBWAverage = "BW_average"
	KeyMsgRate   = "MsgRate"
	KeyTypical   = "t_typical"
	KeyP99       = "percentile_99"
	KeyP999      = "percentile_99.9"
)

// Keys of test_info: the test as perftest names it (e.g.
// "Atomic_FETCH_AND_ADD_BW_Test") and as xrnic-perf's command line names
// it (e.g. "atomic_bw").
const (
	KeyTest      = "test"
	KeyXrnicTest = "xrnic_test"
)

// Document is the whole file.
type Document struct {
	TestInfo map[string]any `json:"test_info"`
	Results  any            `json:"results"`
}

// Write writes the document of a run: results holds one row per size
// (BWResult or LatResult values).
func Write(w io.Writer, info map[string]any, results []any) error {
	var res any = results
	if len(results) == 1 {
		res = results[0]
	}
	b, err := json.MarshalIndent(Document{TestInfo: info, Results: res}, "", "\t")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Rows decodes the results of a document, one map per size, whatever
// the test (bandwidth and latency rows have different keys).
func Rows(b []byte) ([]map[string]any, error) {
	var doc struct {
		Results json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var one map[string]any
	if json.Unmarshal(doc.Results, &one) == nil {
		return []map[string]any{one}, nil
	}
	var many []map[string]any
	err := json.Unmarshal(doc.Results, &many)
	return many, err
}
