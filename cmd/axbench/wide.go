package main

import (
	"context"
	"fmt"
	"math"
)

// runWide runs one Scheduler with -wide-workers (1000) for -wide-for (5
// minutes) in this process while a feeder keeps jobs available, and
// reports jobs/s per -wide-interval: a wide scheduler should stay as fast
// in its last minute as in its first although the table fills with
// finished jobs (about rate × duration of them; the default 24h Retention
// prunes none). A run with -wide-base workers (100) of the same length,
// on a database of its own, is the comparison: the issue wants the wide
// one at least 1.5× as fast.
func runWide(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"workers": o.wideWorkers, "base": o.wideBase, "for": o.wideFor.String(),
		"interval": o.wideInterval.String(), "feed_batch": o.feedBatch, "conns": connsParam(o.conns)})
	counts := []int{o.wideBase, o.wideWorkers}
	results := make([]*feedResult, len(counts))
	costs := table{Title: "server cost per run, by table (counters over the run; dead and size at its end)", Columns: statsColumns}
	statements := table{Title: "pg_stat_statements: the statements with the most server time, per run", Columns: statementColumns("run")}
	plans := table{Title: "plans of the scheduler's prepared statements (executions)", Columns: planColumns}
	for i, w := range counts {
		res, err := b.wideRun(ctx, w, r, i == 0)
		if err != nil {
			return nil, fmt.Errorf("W=%d: %w", w, err)
		}
		results[i] = res
		label := fmt.Sprintf("W=%d", w)
		costs.Rows = append(costs.Rows, res.cost.tableRows(label)...)
		plans.Rows = append(plans.Rows, planRows(label, res.plans, 4)...)
		statements.Rows = append(statements.Rows, statementRows(label, res.top)...)
	}
	base, wide := results[0], results[1]
	t := table{Title: fmt.Sprintf("jobs/s per %s", o.wideInterval), Columns: []string{"interval", fmt.Sprintf("W=%d", o.wideBase), fmt.Sprintf("W=%d", o.wideWorkers)}}
	for i := range max(len(base.intervals), len(wide.intervals)) {
		t.Rows = append(t.Rows, []string{fmt.Sprint(i + 1), cell(base.intervals, i), cell(wide.intervals, i)})
	}
	for i, res := range results {
		w := counts[i]
		r.add(fmt.Sprintf("W=%d: jobs/s over %s", w, o.wideFor), res.rate, "jobs/s")
		change := 100 * (res.intervals[len(res.intervals)-1]/res.intervals[0] - 1)
		name := fmt.Sprintf("W=%d: last vs first interval", w)
		if w == o.wideWorkers {
			r.check(name, change, "%", "within ±10", math.Abs(change) <= 10)
		} else {
			r.add(name, change, "%")
		}
		res.cost.addMetrics(r, fmt.Sprintf("W=%d: ", w))
		if res.left > 0 {
			r.note("W=%d: %d jobs the producer left were not run within %s after the measured time; per-job costs divide by the jobs run", w, res.left, drainLimit)
		}
	}
	r.atLeast(fmt.Sprintf("W=%d / W=%d jobs/s", o.wideWorkers, o.wideBase), wide.rate/base.rate, "×", 1.5)
	r.Tables = append(r.Tables, t, costs, plans)
	if len(statements.Rows) > 0 {
		r.Tables = append(r.Tables, statements)
	}
	r.note("each run: one Scheduler in this process on a fresh database, no warm-up; a producer (own pool, same process) keeps at least %d jobs due with ScheduleMany batches of %d; the jobs it left waiting are drained after the measured time (for up to %s)", 2*o.feedBatch, o.feedBatch, drainLimit)
	statsNote(r, b.machine.Server.Kind == "shared")
	return r, nil
}

// wideRun is one run of runWide on a database of its own; the first notes
// the tables' storage parameters in r.
func (b *bench) wideRun(ctx context.Context, workers int, r *result, first bool) (*feedResult, error) {
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	res, err := b.feedRun(ctx, d, feedSpec{label: fmt.Sprintf("wide W=%d", workers), workers: workers,
		measure: b.opt.wideFor, interval: b.opt.wideInterval})
	if err == nil && first {
		err = d.noteStorageParams(ctx, r)
	}
	return res, err
}

func cell(v []float64, i int) string {
	if i >= len(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v[i])
}
