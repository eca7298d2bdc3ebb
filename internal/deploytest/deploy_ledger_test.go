package deploytest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// executionsTable is the table internal/faulttest/worker records every
// execution in (one row per job, attempt and node; fence is the attempt's
// fencing token, NULL from workers older than the column).
const executionsTable = `CREATE TABLE executions (
	job_id           uuid        NOT NULL,
	node             text        NOT NULL,
	attempt          integer     NOT NULL,
	run_at           timestamptz NOT NULL,
	started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
	host_started_at  timestamptz,
	claimed_at       timestamptz,
	finished_at      timestamptz,
	host_finished_at timestamptz,
	outcome          text,
	fence            bigint,
	PRIMARY KEY (job_id, attempt, node)
)`

// execution is one row of the executions table.
type execution struct {
	job     uuid.UUID
	node    string
	attempt int
	fence   int64 // 0 when the worker did not record it
	started time.Time
	outcome string
}

// executions reads the executions table.
func executions(t *testing.T, ledger *pgxpool.Pool) map[uuid.UUID][]execution {
	t.Helper()
	rows, err := ledger.Query(context.Background(),
		`SELECT job_id, node, attempt, coalesce(fence, 0), started_at, coalesce(outcome, '') FROM executions ORDER BY started_at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID][]execution{}
	for rows.Next() {
		var e execution
		if err := rows.Scan((*[16]byte)(&e.job), &e.node, &e.attempt, &e.fence, &e.started, &e.outcome); err != nil {
			t.Fatal(err)
		}
		out[e.job] = append(out[e.job], e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// jobStates reads the state of every job of kind in the jobs' database.
func jobStates(t *testing.T, pool *pgxpool.Pool, kind string) map[uuid.UUID]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, state FROM ax.jobs_all WHERE kind = $1`, kind)
	if err != nil && strings.Contains(err.Error(), "jobs_all") {
		rows, err = pool.Query(context.Background(), `SELECT id, state FROM ax.jobs WHERE kind = $1`, kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var state string
		if err := rows.Scan((*[16]byte)(&id), &state); err != nil {
			t.Fatal(err)
		}
		out[id] = state
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// acked is a success a worker reported written (EVENT succeeded): the
// job, the attempt and the host that ran it.
type acked struct {
	job     uuid.UUID
	attempt int
	node    string
}

// ackedSuccesses collects the EVENT succeeded lines of workers.
func ackedSuccesses(t *testing.T, workers ...*proc) map[acked]bool {
	t.Helper()
	out := map[acked]bool{}
	for _, w := range workers {
		for _, l := range w.has("EVENT succeeded ") {
			f := strings.Fields(l)
			id, err := uuid.Parse(f[0])
			if err != nil {
				t.Fatalf("%s: bad line %q", w.name, l)
			}
			n, _ := strconv.Atoi(f[1])
			out[acked{id, n, w.name}] = true
		}
	}
	return out
}

// scheduledIDs collects the IDs loaders printed (Schedule returned them).
func scheduledIDs(t *testing.T, loaders ...*proc) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for _, l := range loaders {
		for _, s := range l.has("SCHEDULED ") {
			id, err := uuid.Parse(s)
			if err != nil {
				t.Fatalf("%s: bad line %q", l.name, s)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// verdict is what a scenario found about its jobs.
type verdict struct {
	scheduled int // Schedule returned
	errors    int // Schedule returned an error
	run       int // scheduled jobs executed at least once
	lost      int // scheduled jobs missing from the store, or never run
	twice     int // jobs executed more than once
	// Breaches of what a second run may be: after a success the host saw
	// written, a third run, or a fencing token that did not grow.
	afterAck, thrice, fenceNotUp int
	notDone                      int // scheduled jobs present but not succeeded
	lostIDs, breachIDs           []string
}

func (v verdict) String() string {
	return fmt.Sprintf("jobs scheduled %d (Schedule errors %d), run %d, lost %d, run twice %d (after a written success %d, three times or more %d, fencing token not higher %d), not succeeded %d",
		v.scheduled, v.errors, v.run, v.lost, v.twice, v.afterAck, v.thrice, v.fenceNotUp, v.notDone)
}

// judge compares the jobs loaders scheduled with the store's jobs and the
// executions recorded. Every job executed twice is checked: the second
// run must follow an attempt whose success no host saw written, have a
// higher fencing token (when recorded), and be the last.
func judge(ids []uuid.UUID, errs int, states map[uuid.UUID]string, execs map[uuid.UUID][]execution, acks map[acked]bool) verdict {
	v := verdict{scheduled: len(ids), errors: errs}
	for _, id := range ids {
		st, ok := states[id]
		ex := execs[id]
		switch {
		case !ok || len(ex) == 0:
			v.lost++
			if len(v.lostIDs) < 10 {
				v.lostIDs = append(v.lostIDs, fmt.Sprintf("%s (in store: %t, state %q, executions %d)", id, ok, st, len(ex)))
			}
			continue
		case st != "succeeded":
			v.notDone++
		}
		v.run++
	}
	for id, ex := range execs {
		if len(ex) < 2 {
			continue
		}
		v.twice++
		breach := ""
		if len(ex) > 2 {
			v.thrice++
			breach = "three runs"
		}
		for i := 1; i < len(ex); i++ {
			prev := ex[i-1]
			if acks[acked{id, prev.attempt, prev.node}] {
				v.afterAck++
				breach = "run after its success was written"
			}
			if prev.fence != 0 && ex[i].fence <= prev.fence {
				v.fenceNotUp++
				breach = "fencing token did not grow"
			}
		}
		if breach != "" && len(v.breachIDs) < 10 {
			v.breachIDs = append(v.breachIDs, fmt.Sprintf("%s: %s: %v", id, breach, ex))
		}
	}
	return v
}

// tickGaps returns the tick times of a periodic kind's jobs in order, the
// ticks that appear more than once, and the ticks of the schedule (every
// interval) that have no job.
func tickGaps(t *testing.T, pool *pgxpool.Pool, kind string, every time.Duration) (ticks, doubled, missed []time.Time) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT run_at FROM ax.jobs_all WHERE kind = $1 ORDER BY run_at`, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		ticks = append(ticks, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ticks); i++ {
		d := ticks[i].Sub(ticks[i-1])
		switch {
		case d == 0:
			doubled = append(doubled, ticks[i])
		case d > every:
			for at := ticks[i-1].Add(every); at.Before(ticks[i]); at = at.Add(every) {
				missed = append(missed, at)
			}
		}
	}
	return ticks, doubled, missed
}
