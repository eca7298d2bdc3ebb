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
// per minute, stacked) and start lag (largest per minute), as one host
// saw them (Activity).
func activityCharts(ms []MinuteStats) (throughput, lag *chart) {
	return drawCharts(ms, hostWindow)
}

// chartWindow words a chart's captions: what is counted, over what, per
// what bucket, and how a bucket's start is labelled.
type chartWindow struct {
	what, over, per, label string
}

var (
	hostWindow  = chartWindow{"finished attempts", "the last hour", "a minute", "15:04"}
	storeHour   = chartWindow{"jobs finished", "the last hour", "a minute", "15:04"}
	storeDay    = chartWindow{"jobs finished", "the last day", "an hour", "Jan 2 15:04"}
	chartRanges = map[string]struct {
		win   chartWindow
		step  time.Duration
		count int
	}{
		"hour": {storeHour, time.Minute, 60},
		"day":  {storeDay, time.Hour, 24},
	}
)

func drawCharts(ms []MinuteStats, win chartWindow) (throughput, lag *chart) {
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
		Caption: fmt.Sprintf("%d %s in %s, at most %d %s", total, win.what, win.over, maxDone, win.per)}
	lag = &chart{W: chartWidth, H: chartHeight, Empty: maxLag == 0,
		Caption: "largest start lag " + win.per + ", at most " + humanDuration(maxLag)}
	for i, m := range ms {
		x := float64(i) * bw
		label := m.Start.UTC().Format(win.label)
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
