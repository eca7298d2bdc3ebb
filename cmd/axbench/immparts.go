package main

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// insertClaimedPrefix is how pgstore's insert-claimed statement
// (insertclaim.go) begins, to find it in pg_stat_statements and
// pg_prepared_statements.
const insertClaimedPrefix = "WITH r AS ("

// scheduleParts adds where immediate's Schedule calls spent their time,
// from the direct starts' traced InsertClaimed calls (timedStore with
// callTracer): pool acquire, the statement's round trip, the store's Go
// code around it, and Schedule's own code (the call minus its
// InsertClaimed; paired in order, when every call made one). The slowest
// 1 % of calls are split the same way, to say what their tail is made of.
func scheduleParts(r *result, ts *timedStore, called, returned []time.Time) {
	calls := make(durations, 0, len(called))
	for i := range called {
		if returned[i].IsZero() {
			break // the call failed, and the scenario with it
		}
		calls = append(calls, returned[i].Sub(called[i]))
	}
	var direct, others []storeCall
	for _, c := range ts.snapshot() {
		if c.op == opDirect {
			direct = append(direct, c)
		} else {
			others = append(others, c)
		}
	}
	if len(direct) == 0 {
		return
	}
	acquire, stmt, storeGo := make(durations, len(direct)), make(durations, len(direct)), make(durations, len(direct))
	for i, c := range direct {
		acquire[i], stmt[i] = c.parts.acquire, c.parts.query
		storeGo[i] = c.took - c.parts.acquire - c.parts.query
	}
	slices.SortFunc(others, func(a, b storeCall) int { return int(a.at - b.at) }) // recorded as they ended
	outside, paired := pairCalls(direct, ts.begin, called, calls)
	for _, p := range []struct {
		name string
		d    durations
	}{{"pool acquire", acquire}, {"statement round trip", stmt}, {"store's Go code", storeGo}, {"Schedule outside InsertClaimed", outside}} {
		if p.d == nil {
			continue // not paired
		}
		d := slices.Clone(p.d)
		r.add("Schedule parts: "+p.name+" p50", ms(d.pct(50)), "ms")
		r.add("Schedule parts: "+p.name+" p99", ms(d.pct(99)), "ms")
	}
	if !paired {
		outside = make(durations, len(direct))
	}
	// The slowest 1 % of InsertClaimed calls: mean of each part, and how
	// many overlapped another store call of the scheduler's (a Finish's
	// commit, a claim), against the share among all calls.
	idx := make([]int, len(direct))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(direct[b].took - direct[a].took) })
	k := max(len(idx)/100, 1)
	var sum [5]time.Duration
	slowOverlap := 0
	for _, i := range idx[:k] {
		sum[0] += direct[i].took
		sum[1] += acquire[i]
		sum[2] += stmt[i]
		sum[3] += storeGo[i]
		sum[4] += outside[i]
		if overlaps(direct[i], others) {
			slowOverlap++
		}
	}
	allOverlap := 0
	for _, c := range direct {
		if overlaps(c, others) {
			allOverlap++
		}
	}
	n := time.Duration(k)
	r.note("slowest 1 %% of InsertClaimed calls (%d), mean %.2f ms: pool acquire %.2f, statement round trip %.2f, store's Go code %.2f, Schedule outside InsertClaimed %.2f ms; %.0f %% of them overlapped another store call of the scheduler (Finish, claim, lease extension), against %.0f %% of all",
		k, ms(sum[0]/n), ms(sum[1]/n), ms(sum[2]/n), ms(sum[3]/n), ms(sum[4]/n),
		100*float64(slowOverlap)/float64(k), 100*float64(allOverlap)/float64(len(direct)))
}

// pairCalls returns, for each direct call, the time of the Schedule call
// that made it outside it (Schedule's own code), the Schedule call found
// by time (calls are made one at a time: called[i] is when call i began,
// calls[i] how long it took), and whether every direct call was paired.
func pairCalls(direct []storeCall, begin time.Time, called []time.Time, calls durations) (durations, bool) {
	out := make(durations, len(direct))
	j := 0
	for i, c := range direct {
		at := begin.Add(c.at)
		for j < len(calls) && called[j].Add(calls[j]).Before(at) {
			j++
		}
		if j == len(calls) || at.Before(called[j]) {
			return nil, false
		}
		out[i] = calls[j] - c.took
	}
	return out, true
}

// overlaps reports whether c was in flight at the same time as one of
// others (sorted by start).
func overlaps(c storeCall, others []storeCall) bool {
	end := c.at + c.took
	i, _ := slices.BinarySearchFunc(others, end, func(o storeCall, t time.Duration) int { return int(o.at - t) })
	for i--; i >= 0; i-- {
		if o := others[i]; o.at+o.took > c.at {
			return true
		} else if o.at < c.at-time.Second {
			return false
		}
	}
	return false
}

// immediateServer is the server's side of immediate's breakdown:
// pg_stat_statements for the insert-claimed statement's execution time
// (which ends before the commit) and pg_stat_wal for the WAL syncs that
// commits wait for (timed with track_wal_io_timing, set on the scenario's
// database when the role may).
type immediateServer struct {
	d          *benchDB
	statements bool
	walTimed   bool
	syncs      int64
	syncMS     float64
}

func (d *benchDB) immediateServer(ctx context.Context) *immediateServer {
	s := &immediateServer{d: d, statements: d.statStatements(ctx)}
	if s.statements {
		_ = d.resetStatements(ctx)
	}
	s.walTimed = d.exec(ctx, "ALTER DATABASE "+pgx.Identifier{d.name}.Sanitize()+" SET track_wal_io_timing = on") == nil
	_ = d.pool.QueryRow(ctx, `SELECT wal_sync, wal_sync_time FROM pg_stat_wal`).Scan(&s.syncs, &s.syncMS)
	return s
}

// end adds the server's figures since immediateServer to r.
func (s *immediateServer) end(ctx context.Context, r *result) {
	var syncs int64
	var syncMS float64
	if err := s.d.pool.QueryRow(ctx, `SELECT wal_sync, wal_sync_time FROM pg_stat_wal`).Scan(&syncs, &syncMS); err == nil {
		r.add("WAL syncs (cluster-wide)", float64(syncs-s.syncs), "count")
		if s.walTimed && syncs > s.syncs {
			r.add("WAL sync mean (cluster-wide)", (syncMS-s.syncMS)/float64(syncs-s.syncs), "ms")
		}
	}
	if !s.statements {
		r.note("pg_stat_statements is not loaded on this server (run with -private for the server's execution time)")
		return
	}
	var calls, plans int64
	var mean, maxT, stddev, planMean float64
	err := s.d.pool.QueryRow(ctx, `SELECT sum(calls)::bigint, sum(plans)::bigint,
			sum(total_exec_time) / greatest(sum(calls), 1), max(max_exec_time), max(stddev_exec_time),
			sum(total_plan_time) / greatest(sum(plans), 1)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND starts_with(query, $1)`,
		insertClaimedPrefix).Scan(&calls, &plans, &mean, &maxT, &stddev, &planMean)
	if err != nil || calls == 0 {
		return
	}
	r.add("InsertClaimed statement on the server (before commit), mean", mean, "ms")
	r.add("InsertClaimed statement on the server (before commit), stddev", stddev, "ms")
	r.add("InsertClaimed statement on the server (before commit), max", maxT, "ms")
	if plans > 0 { // pg_stat_statements.track_planning = on
		r.add("InsertClaimed planning, mean", planMean, "ms")
		r.add("InsertClaimed plannings per execution", float64(plans)/float64(calls), "")
	}
	r.note("InsertClaimed executions counted by pg_stat_statements: %d", calls)
}
