package perfsuite

import (
	"fmt"
	"math"
	"strings"
)

// A minimal SVG line chart: x on a log2 axis (message sizes), y linear or
// log10; one polyline with markers per series and a legend.

type series struct {
	Name string
	X, Y []float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

func svgChart(title, xlabel, ylabel string, ss []series, logY bool) string {
	const W, H = 900, 500
	const l, r, t, b = 80, 270, 50, 60
	pw, ph := float64(W-l-r), float64(H-t-b)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for i := range s.X {
			if s.Y[i] <= 0 && logY {
				continue
			}
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 1, 2, 0, 1
	}
	lx := func(v float64) float64 { return math.Log2(math.Max(v, 1)) }
	x0, x1 := lx(xmin), lx(xmax)
	if x1 == x0 {
		x1 = x0 + 1
	}
	var y0, y1 float64
	ty := func(v float64) float64 { return v }
	if logY {
		ty = func(v float64) float64 { return math.Log10(math.Max(v, 1e-9)) }
		y0, y1 = math.Floor(ty(ymin)), math.Ceil(ty(ymax))
	} else {
		y0, y1 = 0, niceCeil(ymax)
	}
	if y1 == y0 {
		y1 = y0 + 1
	}
	px := func(v float64) float64 { return l + (lx(v)-x0)/(x1-x0)*pw }
	py := func(v float64) float64 { return t + ph - (ty(v)-y0)/(y1-y0)*ph }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", W, H)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&sb, `<text x="%d" y="28" font-size="17" font-weight="bold">%s</text>`+"\n", l, esc(title))
	// Grid and ticks.
	for e := math.Ceil(x0); e <= x1; e++ {
		x := l + (e-x0)/(x1-x0)*pw
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, t, x, t+ph)
		if int(e)%2 == 0 || x1-x0 < 10 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, t+ph+18, sizeLabel(math.Exp2(e)))
		}
	}
	var ticks []float64
	if logY {
		for v := y0; v <= y1; v++ {
			ticks = append(ticks, v)
		}
	} else {
		for i := 0; i <= 5; i++ {
			ticks = append(ticks, y0+(y1-y0)*float64(i)/5)
		}
	}
	for _, v := range ticks {
		y := t + ph - (v-y0)/(y1-y0)*ph
		label := trimFloat(v)
		if logY {
			label = trimFloat(math.Pow(10, v))
		}
		fmt.Fprintf(&sb, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", l, y, l+pw, y)
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", l-6, y+4, label)
	}
	fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", l, t, pw, ph)
	fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", l+pw/2, H-15, esc(xlabel))
	fmt.Fprintf(&sb, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">%s</text>`+"\n", t+ph/2, t+ph/2, esc(ylabel))
	for i, s := range ss {
		c := palette[i%len(palette)]
		var pts []string
		for k := range s.X {
			if logY && s.Y[k] <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[k]), py(s.Y[k])))
		}
		dash := ""
		if strings.Contains(s.Name, "TCP") {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), c, dash)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&sb, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", xy[0], xy[1], c)
		}
		ly := t + 10 + i*22
		fmt.Fprintf(&sb, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="%s" stroke-width="3"%s/>`+"\n", l+pw+12, ly, l+pw+36, ly, c, dash)
		fmt.Fprintf(&sb, `<text x="%.0f" y="%d">%s</text>`+"\n", l+pw+42, ly+4, esc(s.Name))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func sizeLabel(v float64) string {
	switch {
	case v >= 1<<20:
		return trimFloat(v/(1<<20)) + "M"
	case v >= 1<<10:
		return trimFloat(v/(1<<10)) + "K"
	}
	return trimFloat(v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
