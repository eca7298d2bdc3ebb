package main

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// runBacklog measures, on an empty table and then with more and more
// far-future scheduled jobs (of the same kind and priority as the due ones,
// the claim index's worst case) and finally with finished jobs added:
// Claim latency (store.Claim timed directly, 100 jobs a call), the latency
// of a Claim that finds nothing due, a Scheduler's no-op throughput, and the
// RSS of a worker process running a Scheduler on that table. Bulk rows are
// written with generate_series straight into the jobs table.
func runBacklog(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"future": o.backlogSizes, "finished": o.backlogFinished, "due_claimed": o.backlogDue,
		"run": o.backlogRun, "rss_for": o.rssFor.String(), "conns": connsParam(o.conns)})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()

	type level struct {
		name             string
		future, finished int
	}
	levels := []level{{"empty", 0, 0}}
	for _, n := range o.backlogList {
		levels = append(levels, level{fmt.Sprintf("%d future", n), n, 0})
	}
	if o.backlogFinished > 0 {
		last := levels[len(levels)-1].future
		levels = append(levels, level{fmt.Sprintf("%d future + %d finished", last, o.backlogFinished), last, o.backlogFinished})
	}
	t := table{Title: "by table content", Columns: []string{"table", "claim p50 ms", "claim p99 ms", "empty claim p50 ms", "jobs/s", "worker RSS MB", "peak RSS MB"}}
	var emptyP50 float64
	haveFuture, haveFinished := 0, 0
	for i, lv := range levels {
		if lv.future > haveFuture {
			b.progressf("backlog: inserting %d far-future jobs", lv.future-haveFuture)
			err := d.exec(ctx, `INSERT INTO {jobs} (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
				SELECT gen_random_uuid(), $1, 'null', 2, now() + interval '30 days' + g * interval '1 second',
					now() + interval '30 days' + g * interval '1 second', 20
				FROM generate_series($2::int, $3::int) g`, noopKind, haveFuture+1, lv.future)
			if err != nil {
				return nil, fmt.Errorf("insert far-future jobs: %w", err)
			}
			haveFuture = lv.future
		}
		if lv.finished > haveFinished {
			b.progressf("backlog: inserting %d finished jobs", lv.finished-haveFinished)
			err := d.exec(ctx, `INSERT INTO {jobs} (id, kind, payload, priority, run_at, scheduled_at, max_attempts, state, attempt,
					created_at, attempted_at, finished_at)
				SELECT gen_random_uuid(), $1, 'null', 2, now() - interval '1 hour', now() - interval '1 hour', 20, 'succeeded', 1,
					now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour' + g * interval '1 microsecond'
				FROM generate_series(1, $2::int) g`, noopKind, lv.finished-haveFinished)
			if err != nil {
				return nil, fmt.Errorf("insert finished jobs: %w", err)
			}
			haveFinished = lv.finished
		}
		if err := d.exec(ctx, "VACUUM ANALYZE {jobs}"); err != nil {
			return nil, err
		}
		b.progressf("backlog: measuring with %s", lv.name)
		claims, empties, err := measureClaims(ctx, d, o.backlogDue)
		if err != nil {
			return nil, fmt.Errorf("%s: claims: %w", lv.name, err)
		}
		rate, err := backlogThroughput(ctx, b, d, o.backlogRun)
		if err != nil {
			return nil, fmt.Errorf("%s: throughput: %w", lv.name, err)
		}
		rss, err := workerRSS(ctx, b, d, o.rssFor)
		if err != nil {
			return nil, fmt.Errorf("%s: worker RSS: %w", lv.name, err)
		}
		p50 := ms(claims.pct(50))
		t.Rows = append(t.Rows, []string{lv.name, fmt.Sprintf("%.2f", p50), fmt.Sprintf("%.2f", ms(claims.pct(99))),
			fmt.Sprintf("%.2f", ms(empties.pct(50))), fmt.Sprintf("%.0f", rate),
			fmt.Sprintf("%.1f", float64(rss.RSSKB)/1024), fmt.Sprintf("%.1f", float64(rss.PeakKB)/1024)})
		if i == 0 {
			emptyP50 = p50
			r.add("claim p50, empty table", p50, "ms")
			r.add("no-op jobs/s, empty table", rate, "jobs/s")
			continue
		}
		r.atMost(fmt.Sprintf("claim p50 ratio, %s / empty", lv.name), p50/emptyP50, "×", 2)
		r.add(fmt.Sprintf("no-op jobs/s, %s", lv.name), rate, "jobs/s")
		if lv.finished == 0 && lv.future == o.backlogList[len(o.backlogList)-1] {
			r.check(fmt.Sprintf("worker peak RSS, %s", lv.name), float64(rss.PeakKB)/1024, "MB", "< 64", rss.PeakKB < 64*1024)
		}
	}
	r.Tables = append(r.Tables, t)
	r.note("claim: store.Claim of up to 100 due jobs (limit 100, like a 100-worker host) timed from the client, over %d due jobs; empty claim: nothing due", o.backlogDue)
	r.note("RSS: VmRSS of a worker process (default Config, no due jobs) sampled every 100 ms for %s; far-future rows are due in 30+ days, finished rows succeeded an hour ago", o.rssFor)
	return r, nil
}

// measureClaims inserts due jobs, claims them 100 at a time timing each
// Claim, then times Claims that find nothing, and deletes the claimed rows.
func measureClaims(ctx context.Context, d *benchDB, due int) (claims, empties durations, err error) {
	s, err := d.scheduler(0)
	if err != nil {
		return nil, nil, err
	}
	if _, err := scheduleNoops(ctx, s, due, 10_000); err != nil {
		return nil, nil, err
	}
	params := &store.ClaimParams{Owner: "axbench", Kinds: []store.KindLimit{{Kind: noopKind, Limit: 100}},
		Limit: 100, LeaseDuration: time.Minute}
	for got := 0; got < due; {
		t0 := time.Now()
		res, err := d.store.Claim(ctx, params)
		if err != nil {
			return nil, nil, err
		}
		claims = append(claims, time.Since(t0))
		if len(res.Jobs) == 0 {
			return nil, nil, fmt.Errorf("claim found nothing after %d of %d due jobs", got, due)
		}
		got += len(res.Jobs)
	}
	for range 50 {
		t0 := time.Now()
		res, err := d.store.Claim(ctx, params)
		if err != nil {
			return nil, nil, err
		}
		empties = append(empties, time.Since(t0))
		if len(res.Jobs) != 0 {
			return nil, nil, fmt.Errorf("claim found %d jobs after all were claimed", len(res.Jobs))
		}
	}
	if err := d.exec(ctx, "DELETE FROM {jobs} WHERE state = 'running'"); err != nil {
		return nil, nil, fmt.Errorf("delete claimed jobs: %w", err)
	}
	return claims, empties, nil
}

// backlogThroughput runs n due no-op jobs with a 100-worker Scheduler and
// deletes them afterwards.
func backlogThroughput(ctx context.Context, b *bench, d *benchDB, n int) (float64, error) {
	s, err := d.scheduler(0)
	if err != nil {
		return 0, err
	}
	c := newCounter(n)
	if err := s.Handle(noopKind, ax.HandlerFunc(func(context.Context, *ax.Job) error {
		c.inc()
		return nil
	})); err != nil {
		return 0, err
	}
	if _, err := scheduleNoops(ctx, s, n, n); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return 0, err
	}
	waitErr := b.wait(ctx, "backlog throughput", c, 5*time.Minute)
	stopErr := stopScheduler(s)
	rate := float64(n) / time.Since(start).Seconds() // Stop returned: every outcome written
	if waitErr != nil {
		return 0, waitErr
	}
	if stopErr != nil {
		return 0, fmt.Errorf("stop scheduler after %d jobs: %w", n, stopErr)
	}
	for _, q := range []string{"DELETE FROM {jobs} WHERE state = 'succeeded' AND finished_at > now() - interval '10 minutes'",
		"DELETE FROM {history} WHERE finished_at > now() - interval '10 minutes'"} {
		if err := d.exec(ctx, q); err != nil {
			return 0, fmt.Errorf("delete finished jobs: %w", err)
		}
	}
	return rate, nil
}

// workerRSS runs a worker process on the table for a while and returns its
// report.
func workerRSS(ctx context.Context, b *bench, d *benchDB, runFor time.Duration) (workerResult, error) {
	w, err := b.startWorker(ctx, d.dsn, 0, false, 0)
	if err != nil {
		return workerResult{}, err
	}
	defer w.kill()
	if err := w.start(); err != nil {
		return workerResult{}, err
	}
	select {
	case <-time.After(runFor):
	case <-ctx.Done():
		return workerResult{}, ctx.Err()
	}
	return w.stop()
}
