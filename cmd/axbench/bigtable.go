package main

import (
	"context"
	"fmt"
	"time"
)

// runBigtable measures no-op throughput at each -bigtable-workers value on
// an empty table, then after bulk-loading finished jobs up to each of
// -bigtable-sizes (INSERT … SELECT generate_series, see bulk.go), and
// compares each figure with the empty table's at the same worker count:
// the target is that a table full of history costs at most 20%.
//
// Each run is a feedRun: -bigtable-warmup unmeasured, then -bigtable-for
// measured (30 s by default, so that pgx's prepared statements are well
// past PostgreSQL's switch to generic plans after five executions; the
// plans table shows which plans they used). Before each run the database
// is vacuumed, analyzed and checkpointed; after it, the jobs the run
// inserted are deleted, so every run at a level sees the same table.
func runBigtable(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"finished": o.bigSizes, "workers": o.bigWorkers, "for": o.bigFor.String(),
		"warmup": o.bigWarmup.String(), "feed_batch": o.feedBatch, "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()

	levels := append([]int{0}, o.bigSizeList...)
	total := levels[len(levels)-1]
	empty := map[int]float64{}
	t := table{Title: "per run", Columns: []string{"finished rows", "workers", "jobs/s", "vs empty", "min interval", "max interval",
		"jobs run", "left", "drain s", "WAL B/job", "FPI/job", "commits/job", "HOT %"}}
	costs := table{Title: "server cost per run, by table (counters over the run; dead and size at its end)", Columns: statsColumns}
	statements := table{Title: "pg_stat_statements: the statements with the most server time, per run", Columns: statementColumns("run")}
	plans := table{Title: "plans of the scheduler's prepared statements (executions; generic after PostgreSQL's first five)", Columns: planColumns}
	checkpoints := true
	have := 0
	for _, rows := range levels {
		if rows > have {
			b.progressf("bigtable: loading finished jobs up to %d", rows)
			t0 := time.Now()
			if err := d.loadFinished(ctx, have, rows, total, b.progressf); err != nil {
				return nil, err
			}
			r.add(fmt.Sprintf("bulk load of %d finished rows", rows-have), time.Since(t0).Seconds(), "s")
			have = rows
		}
		if err := countJobsFigure(ctx, r, d, rows); err != nil {
			return nil, err
		}
		for _, w := range o.bigWorkList {
			label := fmt.Sprintf("%s W=%d", rowsLabel(rows), w)
			t0 := time.Now()
			cp, err := d.vacuumAll(ctx)
			if err != nil {
				return nil, err
			}
			checkpoints = checkpoints && cp
			b.progressf("bigtable: %s: vacuumed in %.1fs, running", label, time.Since(t0).Seconds())
			mark := time.Now().Add(-time.Second) // IDs of this run's jobs are later
			res, err := b.feedRun(ctx, d, feedSpec{label: "bigtable " + label, workers: w, warmup: o.bigWarmup, measure: o.bigFor,
				interval: o.bigFor / 6, analyze: o.bigFresh})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", label, err)
			}
			if _, err := d.deleteSince(ctx, mark); err != nil {
				return nil, err
			}
			ratio := "-"
			if rows == 0 {
				empty[w] = res.rate
				r.add(fmt.Sprintf("no-op jobs/s, W=%d, empty table", w), res.rate, "jobs/s")
			} else {
				r.add(fmt.Sprintf("no-op jobs/s, W=%d, %s", w, rowsLabel(rows)), res.rate, "jobs/s")
				pct := 100 * res.rate / empty[w]
				r.atLeast(fmt.Sprintf("W=%d: %s / empty", w, rowsLabel(rows)), pct, "%", 80)
				ratio = fmt.Sprintf("%.0f%%", pct)
			}
			lo, hi := minMax(res.intervals)
			c := res.cost
			t.Rows = append(t.Rows, []string{fmt.Sprint(rows), fmt.Sprint(w), fmt.Sprintf("%.0f", res.rate), ratio,
				fmt.Sprintf("%.0f", lo), fmt.Sprintf("%.0f", hi), fmt.Sprint(res.jobs), fmt.Sprint(res.left), fmt.Sprintf("%.1f", res.drain.Seconds()),
				fmt.Sprintf("%.0f", c.perJob(c.wal)), fmt.Sprintf("%.2f", c.perJob(c.walFPI)), fmt.Sprintf("%.2f", c.perJob(c.commits)),
				fmt.Sprintf("%.1f", c.hotShare())})
			costs.Rows = append(costs.Rows, c.tableRows(label)...)
			plans.Rows = append(plans.Rows, planRows(label, res.plans, 4)...)
			statements.Rows = append(statements.Rows, statementRows(label, res.top)...)
		}
	}
	r.Tables = append(r.Tables, t, costs, plans)
	if len(statements.Rows) > 0 {
		r.Tables = append(r.Tables, statements)
	}
	r.note("jobs/s: handler calls during the measured %s after a %s warm-up, while a producer (own pool, same process) kept at least %d jobs due with ScheduleMany batches of %d; min/max interval: jobs/s over sixths of the measured time", o.bigFor, o.bigWarmup, 2*o.feedBatch, o.feedBatch)
	r.note("each run starts from the level's table and adds the jobs it runs (\"jobs run\"), deleted after it; \"empty\" is a table that starts empty; after the measured time the producer stops and the scheduler runs what it left for up to %s (\"drain\"; \"left\" if it could not)", drainLimit)
	if o.bigFresh {
		r.Params["fresh_stats"] = true
		r.note("-bigtable-fresh-stats: ANALYZE ran again once the producer's first %d jobs were in, so the planner knew the backlog from the start", 2*o.feedBatch)
	} else {
		r.note("the VACUUM ANALYZE before each run sees no live job, so the planner's statistics say no job is claimable until autoanalyze runs again during the run (after 2%% of the jobs table changed), as in production where autoanalyze samples a large history and a short queue; -bigtable-fresh-stats analyzes once the backlog is in")
	}
	r.note("before each run: VACUUM (ANALYZE) of the schema's tables and CHECKPOINT%s", map[bool]string{true: "", false: " (CHECKPOINT refused: not superuser)"}[checkpoints])
	statsNote(r, b.machine.Server.Kind == "shared")
	if err := d.noteStorageParams(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// countJobsFigure times the store's CountJobs, what Stats and the
// dashboard's counts read, on the level's table (five calls, after one
// unmeasured call that warms the cache), and adds its median and slowest.
func countJobsFigure(ctx context.Context, r *result, d *benchDB, rows int) error {
	if _, err := d.store.CountJobs(ctx); err != nil {
		return fmt.Errorf("count jobs: %w", err)
	}
	var took durations
	for range 5 {
		t0 := time.Now()
		if _, err := d.store.CountJobs(ctx); err != nil {
			return fmt.Errorf("count jobs: %w", err)
		}
		took = append(took, time.Since(t0))
	}
	r.add(fmt.Sprintf("CountJobs (Stats, dashboard), %s: median of 5", rowsLabel(rows)), ms(took.pct(50)), "ms")
	r.add(fmt.Sprintf("CountJobs, %s: slowest of 5", rowsLabel(rows)), ms(took.max()), "ms")
	return nil
}

// rowsLabel names a table level: "empty", "1M finished", "2500 finished".
func rowsLabel(rows int) string {
	switch {
	case rows == 0:
		return "empty"
	case rows%1_000_000 == 0:
		return fmt.Sprintf("%dM finished", rows/1_000_000)
	case rows%1000 == 0:
		return fmt.Sprintf("%dk finished", rows/1000)
	default:
		return fmt.Sprintf("%d finished", rows)
	}
}

func minMax(v []float64) (lo, hi float64) {
	for i, x := range v {
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}
