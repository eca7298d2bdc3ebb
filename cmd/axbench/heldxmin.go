package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax"
)

// runHeldXmin runs a steady producer (-heldxmin-rate immediate no-op jobs
// a second, ScheduleMany every 10 ms, own pool) against a Scheduler
// through three phases: clean (-heldxmin-clean); held (-heldxmin-hold),
// while one more connection sits in BEGIN; SELECT txid_current(); so that
// no vacuum may remove a row version dead since it began, as a long report
// query or a forgotten session does in production; and recovery
// (-heldxmin-recovery) after it commits.
//
// It reports per phase and per -heldxmin-window: completion rate, start
// lag at the handler on the host clock (handler start minus the host time
// just before the ScheduleMany that inserted the job was called), the
// client-side time of the store's Claim, Finish and ExtendLeases (a
// timedStore wraps the pgstore), queue depth (jobs inserted minus jobs
// started, counted in process so the count costs the server nothing),
// n_dead_tup of every table in the store's schema, and the age of the
// oldest transaction. With pg_stat_statements loaded (the private cluster
// has it) it lists the statements that took the server's time in each
// phase.
func runHeldXmin(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"rate": o.heldRate, "workers": o.heldWorkers, "clean": o.heldClean.String(), "warmup": o.heldWarmup.String(),
		"hold": o.heldHold.String(), "recovery": o.heldRecovery.String(), "window": o.heldWindow.String(), "conns": connsParam(o.conns)})
	if o.heldRescue > 0 {
		r.Params["rescue interval"] = o.heldRescue.String()
	}
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	haveStatements := d.statStatements(ctx)
	run, err := d.openSession(ctx, o.conns, "axbench-run")
	if err != nil {
		return nil, err
	}
	defer run.close()
	prod, err := d.openSession(ctx, o.conns, "axbench-producer")
	if err != nil {
		return nil, err
	}
	defer prod.close()

	ts := newTimedStore(run.store)
	s, err := ax.New(ax.Config{Store: ts, Workers: o.heldWorkers, RescueInterval: o.heldRescue})
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		starts  = make([]handlerStart, 0, int(float64(o.heldRate)*(o.heldClean+o.heldHold+o.heldRecovery).Seconds())+1024)
		started atomic.Int64
		begin   time.Time // set before Start, read by the handler after
	)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		ns, err := strconv.ParseInt(string(j.Payload), 10, 64)
		if err != nil {
			return ax.Permanent(fmt.Errorf("payload %q: %w", j.Payload, err))
		}
		mu.Lock()
		starts = append(starts, handlerStart{now.Sub(begin), now.Sub(time.Unix(0, ns))})
		mu.Unlock()
		started.Add(1)
		return nil
	}))
	if err != nil {
		return nil, err
	}
	producer, err := newScheduler(prod.store, 0)
	if err != nil {
		return nil, err
	}

	held := o.heldClean
	released := held + o.heldHold
	end := released + o.heldRecovery
	// The clean phase's figures leave its warm-up out: a fresh process's
	// first seconds (connections, statements prepared and planned) would
	// otherwise set the baseline the held phase is judged against.
	phases := []phase{{"warm-up", 0, o.heldWarmup}, {"clean", o.heldWarmup, held}, {"held", held, released}, {"recovery", released, end}}

	if haveStatements {
		if err := d.resetStatements(ctx); err != nil {
			return nil, err
		}
	}
	begin = time.Now()
	ts.begin = begin
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	waitCtx, stopWaits := context.WithCancel(ctx)
	defer stopWaits()
	var (
		waits    []waitSample
		waitsErr error
		sampled  = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		waits, waitsErr = sampleWaits(waitCtx, d.dsn, begin, "")
	}()
	var inserted atomic.Int64
	stopProducing, produced := make(chan struct{}), make(chan struct{})
	var produceErr error
	go func() {
		defer close(produced)
		produceErr = produceSteady(ctx, producer, o.heldRate, begin, stopProducing, &inserted)
	}()

	var statements table
	statements.Title = "pg_stat_statements: the statements with the most server time, per phase"
	statements.Columns = statementColumns("phase")
	phaseStatements := func(name string) error {
		if !haveStatements {
			return nil
		}
		top, err := d.topStatements(ctx, 6)
		if err != nil {
			return err
		}
		statements.Rows = append(statements.Rows, statementRows(name, top)...)
		return d.resetStatements(ctx)
	}

	// The run is a list of events in time order: a sample at the end of
	// every window, and the phase changes. One goroutine does them all,
	// so a window's sample is always taken, before the phase change that
	// falls at the same instant.
	type event struct {
		at time.Duration
		do func() error
	}
	var (
		events  []event
		samples []dbSample
		conn    *pgx.Conn
		tx      pgx.Tx
		xid     int64
	)
	defer func() {
		if conn != nil {
			conn.Close(context.Background()) // ends tx on an error path
		}
	}()
	for at := o.heldWindow; ; at += o.heldWindow {
		at = min(at, end)
		events = append(events, event{at, func() error {
			sm, err := sampleDB(ctx, d, time.Since(begin), inserted.Load()-started.Load())
			samples = append(samples, sm)
			return err
		}})
		if at == end {
			break
		}
	}
	events = append(events,
		event{held, func() error {
			if err := phaseStatements("clean"); err != nil {
				return err
			}
			var err error
			if conn, err = pgx.Connect(ctx, d.dsn); err != nil {
				return err
			}
			if tx, err = conn.Begin(ctx); err != nil {
				return err
			}
			err = tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid)
			b.progressf("heldxmin: holding xid %d for %s", xid, o.heldHold)
			return err
		}},
		event{released, func() error {
			if err := phaseStatements("held"); err != nil {
				return err
			}
			b.progressf("heldxmin: released; recovery for %s", o.heldRecovery)
			return tx.Commit(ctx)
		}},
		event{end, func() error { return phaseStatements("recovery") }})
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	b.progressf("heldxmin: clean phase for %s", o.heldClean)
	for _, ev := range events {
		select {
		case <-time.After(time.Until(begin.Add(ev.at))):
		case <-produced:
			err = fmt.Errorf("producer stopped: %v", produceErr)
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err == nil {
			err = ev.do()
		}
		if err != nil {
			break
		}
	}
	close(stopProducing)
	<-produced
	if err == nil {
		err = produceErr
	}
	if err == nil {
		err = b.waitCount(ctx, "heldxmin: drain", started.Load, inserted.Load(), 2*time.Minute)
	}
	stopErr := stopScheduler(s)
	stopWaits()
	<-sampled
	if err == nil {
		err = waitsErr
	}
	if err != nil {
		return nil, err
	}
	if stopErr != nil {
		return nil, fmt.Errorf("stop: %w", stopErr)
	}

	mu.Lock()
	all := starts
	mu.Unlock()
	calls := ts.snapshot()
	st := make(map[string]heldStats, len(phases))
	for _, p := range phases {
		st[p.name] = heldStatsOf(all, calls, p.from, p.to)
	}
	clean, hold, rec := st["clean"], st["held"], st["recovery"]
	for _, p := range phases[1:] { // the warm-up's figures are in the windows' table
		ps := st[p.name]
		r.add(p.name+": completion rate", ps.rate, "jobs/s")
		r.add(p.name+": start lag p50", ms(ps.lag.pct(50)), "ms")
		r.add(p.name+": start lag p99", ms(ps.lag.pct(99)), "ms")
		r.add(p.name+": claim p50", ms(ps.claims.took.pct(50)), "ms")
		r.add(p.name+": claim p99", ms(ps.claims.took.pct(99)), "ms")
		r.add(p.name+": finish p99", ms(ps.finishes.took.pct(99)), "ms")
	}
	r.atLeast("held / clean completion rate", 100*hold.rate/clean.rate, "%", 90)
	r.atMost("held / clean start lag p99", ratio(hold.lag.pct(99), clean.lag.pct(99)), "×", 2)

	// Time series, and recovery: the end of the first window after the
	// release with start lag p99 within 2× the clean phase's and
	// completions at 90% of its rate or more (a window is so only once
	// the backlog is gone). Later windows that miss are counted apart:
	// on a shared machine the clean phase has such windows too.
	windows := 0
	for at := time.Duration(0); at < end; at += o.heldWindow {
		windows++
	}
	tables := samplesTables(samples)
	series := table{Title: fmt.Sprintf("per %s window (t = window end; queue = inserted − started; dead = n_dead_tup of the tables that had any; xact age = age of the oldest transaction's xid or xmin, cluster-wide)", o.heldWindow),
		Columns: append([]string{"t s", "phase", "done/s", "lag p50", "lag p99", "claim p50", "claim p99", "claims", "jobs/claim", "finish p99", "queue", "xact age"}, append(prefixAll("dead ", tables), "schema MB", "load1", "backends (mean, top 3)")...)}
	recoveredAt, laterMisses := time.Duration(-1), 0
	for i := range windows {
		from, to := time.Duration(i)*o.heldWindow, min(time.Duration(i+1)*o.heldWindow, end)
		ws := heldStatsOf(all, calls, from, to)
		ok := ws.lag.pct(99) <= 2*clean.lag.pct(99) && ws.rate >= 0.9*clean.rate
		switch {
		case from < released:
		case recoveredAt < 0 && ok:
			recoveredAt = to - released
		case recoveredAt >= 0 && !ok:
			laterMisses++
		}
		row := []string{fmt.Sprintf("%.0f", to.Seconds()), phaseAt(phases, from), fmt.Sprintf("%.0f", ws.rate),
			fmt.Sprintf("%.2f", ms(ws.lag.pct(50))), fmt.Sprintf("%.2f", ms(ws.lag.pct(99))),
			fmt.Sprintf("%.2f", ms(ws.claims.took.pct(50))), fmt.Sprintf("%.2f", ms(ws.claims.took.pct(99))),
			fmt.Sprint(ws.claims.n), fmt.Sprintf("%.1f", float64(ws.claims.jobs)/float64(max(ws.claims.n, 1))),
			fmt.Sprintf("%.2f", ms(ws.finishes.took.pct(99)))}
		row = append(row, sampleCells(samples, i, tables)...)
		nw, sum := waitsBetween(waits, from, to)
		row = append(row, topWaits(nw, sum, 3))
		series.Rows = append(series.Rows, row)
	}
	if recoveredAt >= 0 {
		r.atMost("recovery after release", recoveredAt.Seconds(), "s", 60)
		r.add("windows after the recovery over those bounds", float64(laterMisses), "count")
	} else {
		r.check("recovery after release", o.heldRecovery.Seconds(), "s", "≤ 60", false)
		r.note("not recovered by the end of the recovery phase: the figure is the phase's length")
	}
	var peakDead int64
	for _, sm := range samples {
		peakDead = max(peakDead, sm.totalDead())
	}
	r.add("peak dead tuples, all tables", float64(peakDead), "count")
	if len(samples) > 0 {
		r.add("dead tuples at the end, all tables", float64(samples[len(samples)-1].totalDead()), "count")
	}
	var maxQueue int64
	for _, sm := range samples {
		maxQueue = max(maxQueue, sm.queue)
	}
	r.add("max queue depth (sampled)", float64(maxQueue), "jobs")
	r.add("recovery: completion rate / clean", 100*rec.rate/clean.rate, "%")
	activity := table{Title: fmt.Sprintf("what the database's active backends did, per phase (pg_stat_activity every %s: mean number of backends per activity, top 8)", waitSampleEvery),
		Columns: []string{"phase", "samples", "activities"}}
	for _, p := range phases {
		n, sum := waitsBetween(waits, p.from, p.to)
		activity.Rows = append(activity.Rows, []string{p.name, fmt.Sprint(n), topWaits(n, sum, 8)})
	}
	r.Tables = append(r.Tables, series, activity)
	if haveStatements {
		r.Tables = append(r.Tables, statements)
	} else {
		r.note("pg_stat_statements is not loaded on this server (run with -private for the statement breakdown)")
	}
	if err := d.noteStorageParams(ctx, r); err != nil {
		return nil, err
	}
	r.note("clean: from the end of the warm-up (%s) to the hold; the warm-up's windows are in the table, not in the phase's figures", o.heldWarmup)
	r.note("held: one extra connection ran BEGIN; SELECT txid_current() (xid %d) at %s and committed at %s", xid, held, released)
	r.note("start lag: host clock, handler start minus the host time just before the producer's ScheduleMany call (includes the insert); claim, finish: client-side time of the store call, through a wrapper of pgstore.Store")
	r.note("targets: held completion rate ≥ 90%% of clean, held lag p99 ≤ 2× clean, recovered within 60 s of the release (the end of the first window after it with lag p99 ≤ 2× clean and ≥ 90%% of its rate; to a multiple of the window)")
	return r, nil
}

// phase is a named span of a run, since its beginning.
type phase struct {
	name     string
	from, to time.Duration
}

func phaseAt(ps []phase, at time.Duration) string {
	for _, p := range ps {
		if at >= p.from && at < p.to {
			return p.name
		}
	}
	return "-"
}

// heldStats summarises a span of a heldxmin run.
type heldStats struct {
	rate     float64
	lag      durations
	claims   callStats
	finishes callStats
}

// handlerStart is when a handler started (since the run began) and its
// start lag.
type handlerStart struct{ at, lag time.Duration }

func heldStatsOf(starts []handlerStart, calls []storeCall, from, to time.Duration) heldStats {
	var hs heldStats
	for _, s := range starts {
		if s.at >= from && s.at < to {
			hs.lag = append(hs.lag, s.lag)
		}
	}
	hs.rate = float64(len(hs.lag)) / (to - from).Seconds()
	hs.claims = summarize(calls, opClaim, from, to)
	hs.finishes = summarize(calls, opFinish, from, to)
	return hs
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

// produceSteady schedules rate immediate no-op jobs a second from begin
// until stop, with a ScheduleMany every 10 ms; each job's payload is the
// host time (Unix ns) just before that call. inserted counts the jobs
// stored.
func produceSteady(ctx context.Context, s *ax.Scheduler, rate int, begin time.Time, stop <-chan struct{}, inserted *atomic.Int64) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var sent int64
	var reqs []ax.Request
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		due := int64(float64(rate) * time.Since(begin).Seconds())
		if due <= sent {
			continue
		}
		t0 := time.Now()
		payload := json.RawMessage(strconv.FormatInt(t0.UnixNano(), 10))
		reqs = reqs[:0]
		for range due - sent {
			reqs = append(reqs, ax.Request{Kind: noopKind, Payload: payload})
		}
		// Not cancelled with ctx mid-call, so inserted stays exact.
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		_, err := s.ScheduleMany(ictx, reqs)
		cancel()
		if err != nil {
			return fmt.Errorf("producer: %w", err)
		}
		sent = due
		inserted.Add(int64(len(reqs)))
	}
}

// dbSample is the server's state at one instant of a run.
type dbSample struct {
	at      time.Duration
	queue   int64
	xactAge int64
	dead    map[string]int64
	bytes   int64
	load1   string
}

func (s dbSample) totalDead() int64 {
	var n int64
	for _, v := range s.dead {
		n += v
	}
	return n
}

// sampleDB reads the server's state: n_dead_tup and size of every table
// in the schema, and the age of the oldest transaction on the server.
func sampleDB(ctx context.Context, d *benchDB, at time.Duration, queue int64) (dbSample, error) {
	sm := dbSample{at: at, queue: queue, dead: map[string]int64{}, load1: load1()}
	st, err := d.readStats(ctx)
	if err != nil {
		return sm, err
	}
	for name, t := range st.tables {
		sm.dead[name] = t.dead
		sm.bytes += t.bytes
	}
	err = d.pool.QueryRow(ctx, `SELECT coalesce(max(greatest(age(backend_xid), age(backend_xmin))), 0)
		FROM pg_stat_activity`).Scan(&sm.xactAge)
	return sm, err
}

// samplesTables lists the tables that had dead tuples in any sample,
// sorted.
func samplesTables(samples []dbSample) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range samples {
		for name, n := range s.dead {
			if n > 0 && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// sampleCells formats the i-th sample, taken at the end of the i-th
// window.
func sampleCells(samples []dbSample, i int, tables []string) []string {
	if i >= len(samples) {
		cells := make([]string, 4+len(tables))
		for i := range cells {
			cells[i] = "-"
		}
		return cells
	}
	s := samples[i]
	cells := []string{fmt.Sprint(s.queue), fmt.Sprint(s.xactAge)}
	for _, t := range tables {
		cells = append(cells, fmt.Sprint(s.dead[t]))
	}
	return append(cells, fmt.Sprintf("%.1f", float64(s.bytes)/(1<<20)), s.load1)
}

func prefixAll(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// load1 is the 1-minute load average.
func load1() string {
	if f := strings.Fields(loadAvg()); len(f) > 0 {
		return f[0]
	}
	return "?"
}
