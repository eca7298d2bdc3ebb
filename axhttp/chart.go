package axhttp

import (
	"fmt"
	"time"
)

// Small bar charts drawn as inline SVG by the templates: every value is a
// number computed here, so the page needs no script to show them.

const (
	chartWidth  = 240
	chartHeight = 40
)

// chart is one bar chart over the Activity's minutes.
type chart struct {
	W, H    int
	Bars    []bar
	Caption string
	Empty   bool
}

// bar is one rectangle (SVG coordinates) with its tooltip.
type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// activityCharts draws a kind's throughput (succeeded and failed attempts
// per minute, stacked) and start lag (largest per minute).
func activityCharts(ms []MinuteStats) (throughput, lag *chart) {
	n := float64(len(ms))
	bw := float64(chartWidth) / n
	maxDone := 0
	var maxLag time.Duration
	total := 0
	for _, m := range ms {
		maxDone = max(maxDone, m.Succeeded+m.Failed)
		maxLag = max(maxLag, m.LagMax)
		total += m.Succeeded + m.Failed
	}
	throughput = &chart{W: chartWidth, H: chartHeight, Empty: total == 0,
		Caption: fmt.Sprintf("%d finished attempts in the last hour, at most %d a minute", total, maxDone)}
	lag = &chart{W: chartWidth, H: chartHeight, Empty: maxLag == 0,
		Caption: "largest start lag a minute, at most " + humanDuration(maxLag)}
	for i, m := range ms {
		x := float64(i) * bw
		label := m.Start.UTC().Format("15:04")
		if maxDone > 0 {
			hs := float64(m.Succeeded) / float64(maxDone) * chartHeight
			hf := float64(m.Failed) / float64(maxDone) * chartHeight
			if m.Succeeded > 0 {
				throughput.Bars = append(throughput.Bars, bar{X: x, Y: chartHeight - hs, W: bw * 0.8, H: hs, Class: "ok",
					Title: fmt.Sprintf("%s: %d succeeded", label, m.Succeeded)})
			}
			if m.Failed > 0 {
				throughput.Bars = append(throughput.Bars, bar{X: x, Y: chartHeight - hs - hf, W: bw * 0.8, H: hf, Class: "bad",
					Title: fmt.Sprintf("%s: %d failed", label, m.Failed)})
			}
		}
		if maxLag > 0 && m.LagMax > 0 {
			hl := float64(m.LagMax) / float64(maxLag) * chartHeight
			lag.Bars = append(lag.Bars, bar{X: x, Y: chartHeight - hl, W: bw * 0.8, H: hl, Class: "lag",
				Title: fmt.Sprintf("%s: start lag max %s, mean %s over %d", label, humanDuration(m.LagMax), humanDuration(m.LagAvg), m.Started)})
		}
	}
	return throughput, lag
}
