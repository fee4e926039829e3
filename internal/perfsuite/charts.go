package perfsuite

import (
	"os"
	"path/filepath"
	"strings"

	"xrnic/internal/perfsuite/perfjson"
)

// The sweep's charts: which runs and keys each SVG (svg.go) plots.

func findRun(runs []benchRun, name, tr string) *benchRun {
	for i := range runs {
		if runs[i].Name == name && runs[i].Transport == tr && len(runs[i].Rows) > 0 {
			return &runs[i]
		}
	}
	return nil
}

func curve(r *benchRun, key string) series {
	var s series
	if r == nil {
		return s
	}
	s.Name = r.Name + " (" + r.Transport + ")"
	for _, row := range r.Rows {
		s.X = append(s.X, num(row, perfjson.KeySize))
		s.Y = append(s.Y, num(row, key))
	}
	return s
}

func writeCharts(out string, runs []benchRun) []string {
	var files []string
	add := func(file, title, ylabel string, logY bool, ss ...series) {
		var keep []series
		for _, s := range ss {
			if len(s.X) > 0 {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			return
		}
		if os.WriteFile(filepath.Join(out, file), []byte(svgChart(title, "message size [bytes]", ylabel, keep, logY)), 0o644) == nil {
			files = append(files, file)
		}
	}
	tcpBW := curve(findRun(runs, "tcp_bw", "kernel TCP"), perfjson.KeyBWAverage)
	tcpBW.Name = "kernel TCP stream"
	var bw, rate, lat, pct []series
	for _, tr := range []string{"afxdp", "kernel"} {
		for _, n := range []string{"write_bw t16", "write_bw t1", "write_bw t16 q4", "read_bw t16", "send_bw t16"} {
			if c := curve(findRun(runs, n, tr), perfjson.KeyBWAverage); len(c.X) > 0 && (n == "write_bw t16" || n == "write_bw t1" || tr == "afxdp") {
				bw = append(bw, c)
			}
			if c := curve(findRun(runs, n, tr), perfjson.KeyMsgRate); len(c.X) > 0 && strings.HasPrefix(n, "write_bw") {
				rate = append(rate, c)
			}
		}
		for _, n := range []string{"write_lat", "read_lat", "send_lat"} {
			if c := curve(findRun(runs, n, tr), perfjson.KeyTypical); len(c.X) > 0 {
				lat = append(lat, c)
			}
		}
		r := findRun(runs, "write_lat", tr)
		for _, k := range []string{perfjson.KeyTypical, perfjson.KeyP99, perfjson.KeyP999} {
			if c := curve(r, k); len(c.X) > 0 {
				c.Name = strings.Replace(k, "percentile_", "", 1) + "% (" + tr + ")"
				if k == perfjson.KeyTypical {
					c.Name = "t_typical (" + tr + ")"
				}
				pct = append(pct, c)
			}
		}
	}
	tcpLat := curve(findRun(runs, "tcp_lat", "kernel TCP"), perfjson.KeyTypical)
	tcpLat.Name = "kernel TCP ping-pong (half RTT)"
	add("bandwidth.svg", "Bandwidth against message size", "BW average [MiB/s]", true, append(bw, tcpBW)...)
	add("msgrate.svg", "Message rate against message size (RDMA Write)", "MsgRate [Mpps]", true, rate...)
	add("latency.svg", "Latency (t_typical) against message size", "t_typical [µs] (half RTT for write/send, full for read)", true, append(lat, tcpLat)...)
	add("latency_percentiles.svg", "write_lat percentiles", "latency [µs] (half RTT)", true, pct...)
	return files
}
