package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one scenario measured.
type result struct {
	Scenario   string         `json:"scenario"`
	Server     string         `json:"server"`
	Params     map[string]any `json:"params"`
	Metrics    []metric       `json:"metrics"`
	Tables     []table        `json:"tables,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
	LoadBefore string         `json:"loadavg_before"`
	LoadAfter  string         `json:"loadavg_after"`
	Seconds    float64        `json:"seconds"`
	Machine    *machine       `json:"machine,omitempty"`
}

// metric is one figure, with its target when the issue sets one.
type metric struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
}

// table is a breakdown printed under the metrics.
type table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

func newResult(params map[string]any) *result { return &result{Params: params} }

// add records a figure without a target.
func (r *result) add(name string, v float64, unit string) {
	if r.undefined(name, v) {
		return
	}
	r.Metrics = append(r.Metrics, metric{Name: name, Value: v, Unit: unit})
}

// check records a figure with its target and whether it was met.
func (r *result) check(name string, v float64, unit, target string, met bool) {
	if r.undefined(name, v) {
		return
	}
	r.Metrics = append(r.Metrics, metric{Name: name, Value: v, Unit: unit, Target: target, Met: &met})
}

// undefined reports whether v is no number (a ratio over an interval that
// ran no job, say) and then notes why the figure is missing: JSON has no
// infinities, and a report that cannot be written loses every figure.
func (r *result) undefined(name string, v float64) bool {
	if !math.IsInf(v, 0) && !math.IsNaN(v) {
		return false
	}
	r.note("%s: undefined (%v): a figure it divides by is zero", name, v)
	return true
}

// atMost and atLeast record a figure against a numeric bound.
func (r *result) atMost(name string, v float64, unit string, bound float64) {
	r.check(name, v, unit, "≤ "+format(bound, unit), v <= bound)
}

func (r *result) atLeast(name string, v float64, unit string, bound float64) {
	r.check(name, v, unit, "≥ "+format(bound, unit), v >= bound)
}

func (r *result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *result) writeJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (r *result) printTable(w io.Writer) {
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	params := make([]string, len(keys))
	for i, k := range keys {
		params[i] = fmt.Sprintf("%s=%v", k, r.Params[k])
	}
	fmt.Fprintf(w, "\n== %s  (%s)\n   server: %s\n   load %s → %s, %.1fs\n", r.Scenario, strings.Join(params, " "), r.Server, r.LoadBefore, r.LoadAfter, r.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   metric\tvalue\tunit\ttarget\t")
	for _, m := range r.Metrics {
		verdict := ""
		if m.Met != nil {
			verdict = "met"
			if !*m.Met {
				verdict = "MISSED"
			}
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\n", m.Name, format(m.Value, m.Unit), m.Unit, m.Target, verdict)
	}
	tw.Flush()
	for _, t := range r.Tables {
		fmt.Fprintf(w, "   -- %s\n", t.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "   %s\t\n", strings.Join(t.Columns, "\t"))
		for _, row := range t.Rows {
			fmt.Fprintf(tw, "   %s\t\n", strings.Join(row, "\t"))
		}
		tw.Flush()
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "   note: %s\n", n)
	}
}

// format prints a value with a precision fit for its unit and size.
func format(v float64, unit string) string {
	switch {
	case unit == "count" || unit == "jobs" || unit == "jobs/s" || unit == "calls":
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// durations holds samples for percentiles.
type durations []time.Duration

// pct returns the nearest-rank percentile p (0..100); sorts d.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if !slices.IsSorted(d) {
		slices.Sort(d)
	}
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func (d durations) max() time.Duration { return d.pct(100) }

func (d durations) mean() time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return sum / time.Duration(len(d))
}

// msCells formats p50, p90, p99 and max of d in ms.
func (d durations) msCells() []string {
	return []string{fmt.Sprintf("%.2f", ms(d.pct(50))), fmt.Sprintf("%.2f", ms(d.pct(90))),
		fmt.Sprintf("%.2f", ms(d.pct(99))), fmt.Sprintf("%.2f", ms(d.max()))}
}
