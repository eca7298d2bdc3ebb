package deploytest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
)

// failoverCase is one run of the failover scenario.
type failoverCase struct {
	sync     bool          // synchronous replication to the standby
	load     time.Duration // how long the loader schedules
	rate     int           // jobs per second
	failAt   time.Duration // promote this long after the loader starts
	workMS   int           // each job's work
	lease    string        // workers' -lease ("" for the default)
	hold     time.Duration // from the promotion to stopping the old primary
	tickSpec string        // the periodic schedule
	tick     time.Duration // its interval
	// asyncCommits: hosts with pgstore.WithAsyncClaimsAndOutcomes, whose
	// claims and outcomes the failover may undo. Still no job may be
	// lost, run three times or not end; a second run may follow a
	// written success, with a fencing token that did not grow.
	asyncCommits bool
	// earlyStart: hosts with pgstore.WithEarlyDirectStart that also
	// schedule jobs of their own (selfRate a second each, due at once),
	// which start during their inserts' flush. Still no job whose
	// Schedule returned may be lost; a job that started and whose
	// Schedule failed may be (counted, not failed on).
	earlyStart bool
	selfRate   int
}

// TestFailoverSync: a primary, a synchronous standby and three hosts on
// a multi-host connection string; while jobs are scheduled, run and
// finish (and a periodic schedule ticks every second), the standby is
// promoted and the old primary stopped (immediately). No job whose
// Schedule returned may be lost, no job whose success a host saw written
// may run again, a second run must carry a higher fencing token and be
// the last, and no tick may fire twice. The time from the promotion to
// the first job claimed on the new primary is printed (defaults: 10 s
// lease, 1 s rescue interval, 10 s leader TTL).
func TestFailoverSync(t *testing.T) {
	c := failoverCase{sync: true, load: 15 * time.Second, rate: 40, failAt: 8 * time.Second, workMS: 300,
		tickSpec: "@every 1s", tick: time.Second}
	if soak() {
		c.load, c.rate, c.failAt = 90*time.Second, 100, 40*time.Second
	}
	runFailover(t, c)
}

// TestFailoverSyncLeaseLost is TestFailoverSync with 2 s leases and the
// old primary left running for 4 s after the promotion: hosts on it wait
// for a commit the gone standby never confirms, their leases lapse on the
// new primary, and other hosts rescue and run those jobs again. Their
// outcomes written to the old primary are lost with it, so each such job
// runs a second time, with a higher fencing token, and no more.
func TestFailoverSyncLeaseLost(t *testing.T) {
	c := failoverCase{sync: true, load: 15 * time.Second, rate: 40, failAt: 6 * time.Second, workMS: 300,
		lease: "2s", hold: 4 * time.Second, tickSpec: "@every 1s", tick: time.Second}
	runFailover(t, c)
}

// TestFailoverSyncAsyncCommits is TestFailoverSync with hosts whose
// claims and outcomes commit without waiting for the WAL flush or the
// standby (pgstore.WithAsyncClaimsAndOutcomes): what the failover undid
// runs again (printed), and still no job whose Schedule returned is
// lost, none runs three times, every one succeeds, and no tick is lost
// or fired twice.
func TestFailoverSyncAsyncCommits(t *testing.T) {
	c := failoverCase{sync: true, load: 15 * time.Second, rate: 40, failAt: 8 * time.Second, workMS: 300,
		tickSpec: "@every 1s", tick: time.Second, asyncCommits: true}
	runFailover(t, c)
}

// TestFailoverSyncEarlyStart is TestFailoverSync with hosts that start
// the jobs they schedule themselves during their inserts' flush
// (pgstore.WithEarlyDirectStart), 10 a second each beside the loader's:
// no job whose Schedule returned may be lost, and the rest of
// TestFailoverSync's rules hold; jobs that ran while their insert was
// lost with the old primary are printed.
func TestFailoverSyncEarlyStart(t *testing.T) {
	c := failoverCase{sync: true, load: 15 * time.Second, rate: 40, failAt: 8 * time.Second, workMS: 300,
		tickSpec: "@every 1s", tick: time.Second, earlyStart: true, selfRate: 10}
	runFailover(t, c)
}

// TestFailoverAsync is the same scenario with asynchronous replication:
// what the old primary acknowledged and had not yet sent is gone after
// the promotion. It measures and prints what was lost (jobs whose
// Schedule returned, successes written and run again) instead of
// failing on it; it fails only on a breach of fencing (a third run, or a
// second one whose token did not grow).
func TestFailoverAsync(t *testing.T) {
	c := failoverCase{sync: false, load: 15 * time.Second, rate: 40, failAt: 8 * time.Second, workMS: 300,
		tickSpec: "@every 1s", tick: time.Second}
	runFailover(t, c)
}

func runFailover(t *testing.T, c failoverCase) {
	skipUnderRace(t)
	sideBySide(t)
	bins := currentBins(t)
	ledgerDSN := pgtest.EmptyDSN(t)
	ledger := pgtest.PoolFor(t, ledgerDSN)
	ctx := context.Background()
	if _, err := ledger.Exec(ctx, executionsTable); err != nil {
		t.Fatal(err)
	}

	root, asPG := serverDir(t)
	primary := newPrimary(t, root, asPG)
	primary.exec("postgres", "CREATE DATABASE ax")
	logs := t.TempDir()
	startProc(t, logs, "migrate", bins+"/loader", "-dsn", primary.dsn("ax"), "-migrate").waitLine(t, "MIGRATED", time.Minute)
	standby := newStandby(t, root, primary)
	primary.waitSync("async")
	if c.sync {
		primary.makeSync()
	}
	dsn := failoverDSN("ax", primary, standby)

	var workers []*proc
	for i := range 3 {
		args := []string{"-dsn", dsn, "-node", "host" + strconv.Itoa(i+1), "-ledger", ledgerDSN, "-say-finished",
			"-periodic-name", "tick", "-periodic-spec", c.tickSpec, "-stop-timeout", "20s"}
		if c.lease != "" {
			args = append(args, "-lease", c.lease, "-rescue", "500ms")
		}
		if c.asyncCommits {
			args = append(args, "-async-commits")
		}
		if c.earlyStart {
			args = append(args, "-early-start", "-schedule-rate", strconv.Itoa(c.selfRate),
				"-schedule-for", c.load.String(), "-schedule-ms", strconv.Itoa(c.workMS))
		}
		workers = append(workers, startProc(t, logs, "host"+strconv.Itoa(i+1), bins+"/worker", args...))
	}
	for _, w := range workers {
		w.waitLine(t, "READY", time.Minute)
	}
	// With earlyStart the hosts began scheduling at READY, a moment
	// before the loader.
	loader := startProc(t, logs, "loader", bins+"/loader", "-dsn", dsn,
		"-n", strconv.Itoa(int(c.load.Seconds())*c.rate), "-rate", strconv.Itoa(c.rate), "-ms", strconv.Itoa(c.workMS))
	loader.waitLine(t, "READY", time.Minute)

	time.Sleep(c.failAt)
	before := len(loader.has("SCHEDULED "))
	promotedAt := time.Now()
	standby.promote()
	promoted := time.Since(promotedAt)
	time.Sleep(c.hold)
	primary.stopImmediate()
	stopped := time.Since(promotedAt)
	// A commit waiting for the synchronous standby whose statement is
	// cancelled (a client's deadline) returns as committed, with only a
	// warning: committed on the old primary alone, and lost with it.
	cancelledWaits := primary.logCount("canceling wait for synchronous replication")
	t.Logf("promoted in %s, old primary stopped %s after the promotion began; %d jobs scheduled before", promoted.Round(time.Millisecond), stopped.Round(time.Millisecond), before)

	newPrimary := pgtest.PoolFor(t, standby.dsn("ax"))
	// The first job claimed on the new primary, by any host: a claim
	// stamped after the promotion completed cannot come from the old
	// primary (with synchronous replication it could not commit there;
	// without, it is not on the new primary).
	promotedBy := promotedAt.Add(promoted)
	var resume time.Duration
	deadline := time.Now().Add(time.Minute)
	for {
		// The test's own reads of the new primary may fail while it is
		// fresh on a loaded machine (a connect that took longer than its
		// connect_timeout of 2 s, in a local CI run): they are retried
		// until the deadline, which bounds the hosts' resumption.
		var first *time.Time
		err := newPrimary.QueryRow(ctx, `SELECT min(attempted_at) FROM ax.jobs_all WHERE attempted_at > $1`, promotedBy).Scan(&first)
		if err == nil && first != nil {
			resume = first.Sub(promotedAt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job claimed on the new primary within a minute of the promotion (last read: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	loader.waitLine(t, "DONE ", c.load+2*time.Minute)
	schedulers := []*proc{loader}
	if c.earlyStart {
		for _, w := range workers {
			w.waitLine(t, "SCHEDULE_DONE ", c.load+2*time.Minute)
		}
		schedulers = append(schedulers, workers...)
	}
	ids := scheduledIDs(t, schedulers...)
	errs := 0
	for _, p := range schedulers {
		errs += len(p.has("ERROR "))
	}
	waitQuiet(t, newPrimary, 2*time.Minute)

	hosts := hostResumes(t, newPrimary, promotedAt, promotedBy)
	listeners := listenersOn(t, newPrimary)
	var leaderUntil time.Time
	if err := newPrimary.QueryRow(ctx, `SELECT coalesce(max(expires_at), '-infinity') FROM ax.leader`).Scan(&leaderUntil); err != nil {
		t.Fatal(err)
	}
	lagBefore := startLag(t, ledger, "run_at < $1", promotedAt)
	lagAfter := startLag(t, ledger, "run_at > $1", promotedAt.Add(15*time.Second))
	for _, w := range workers {
		w.stop(t, 30*time.Second)
	}

	states, execs := jobStates(t, newPrimary, "work"), executions(t, ledger)
	v := judge(ids, errs, states, execs, ackedSuccesses(t, workers...))
	ranUnrecorded := 0 // executions of jobs the new primary does not have
	tickStates := jobStates(t, newPrimary, "tick")
	for id := range execs {
		_, work := states[id]
		_, tick := tickStates[id]
		if !work && !tick {
			ranUnrecorded++
		}
	}
	ticks, doubled, missed := tickGaps(t, newPrimary, "tick", c.tick)
	// A tick that falls while no host can reach a primary is missed and,
	// by the default MisfireRunOnce, fired once with the next: allowed
	// from one interval before the promotion began until the last host
	// resumed on the new primary (plus an interval); a tick missed
	// anywhere else is lost.
	var lastHost time.Duration
	for _, d := range hosts {
		lastHost = max(lastHost, d)
	}
	var coalesced, lostTicks []time.Time
	for _, at := range missed {
		if at.After(promotedAt.Add(-c.tick)) && at.Before(promotedAt.Add(lastHost+c.tick)) {
			coalesced = append(coalesced, at)
		} else {
			lostTicks = append(lostTicks, at)
		}
	}
	tv := judge(nil, 0, nil, tickExecutions(t, ledger, newPrimary), ackedSuccesses(t, workers...))
	mode := "async"
	if c.sync {
		mode = "sync"
	}
	if c.asyncCommits {
		mode += " (hosts with async claims and outcomes)"
	}
	if c.earlyStart {
		mode += fmt.Sprintf(" (hosts with early direct starts, %d jobs a second each; %d of their Schedule calls returned, %d jobs ran that the new primary does not have)",
			c.selfRate, len(ids)-len(scheduledIDs(t, loader)), ranUnrecorded)
	}
	figure(t, "%s replication: %s; time from promotion to the first job claimed on the new primary %s (promotion took %s)",
		mode, v, resume.Round(time.Millisecond), promoted.Round(time.Millisecond))
	figure(t, "old primary's commits acknowledged to a cancelled statement without the standby's confirmation: %d", cancelledWaits)
	figure(t, "hosts' first claims on the new primary after the promotion: %v; listeners on the new primary: %d; leader lease renewed there until %s after the promotion; start lag p99 %s before the failover, %s from 15 s after it",
		hosts, listeners, leaderUntil.Sub(promotedAt).Round(time.Second), lagBefore, lagAfter)
	figure(t, "periodic %s: %d ticks fired, %d fired twice, %d run twice, %d missed during the failover (fired once with the next: MisfireRunOnce), %d missed outside it",
		c.tickSpec, len(ticks), len(doubled), tv.twice, len(coalesced), len(lostTicks))

	if len(hosts) != len(workers) {
		t.Errorf("only %d of %d hosts claimed jobs on the new primary: %v", len(hosts), len(workers), hosts)
	}
	if listeners < len(workers) {
		t.Errorf("%d listeners on the new primary, want %d (one per host)", listeners, len(workers))
	}
	// A lease taken or renewed before the promotion ends within the
	// default 10 s leader TTL of it.
	if !leaderUntil.After(promotedBy.Add(ax.DefaultLeaderTTL)) {
		t.Errorf("no leader lease renewed on the new primary (the last ends %s after the promotion)", leaderUntil.Sub(promotedAt))
	}
	if !c.sync {
		// Measured, not promised: what the old primary acknowledged and
		// had not sent is gone, fencing tokens included (the new primary
		// hands out again tokens the old one issued; the lease token, a
		// random UUID, still refuses the old owner's outcome).
		return
	}
	switch {
	case v.thrice+tv.thrice > 0:
		t.Errorf("jobs ran three times or more: %v %v", v.breachIDs, tv.breachIDs)
	case v.fenceNotUp+tv.fenceNotUp > 0 && !c.asyncCommits:
		t.Errorf("fencing breached: %v %v", v.breachIDs, tv.breachIDs)
	}
	if len(lostTicks) > 0 {
		t.Errorf("periodic ticks lost outside the failover: %v", lostTicks)
	}
	if v.lost > 0 {
		t.Errorf("%d jobs whose Schedule returned were lost: %v", v.lost, v.lostIDs)
	}
	if (v.afterAck > 0 || tv.afterAck > 0) && !c.asyncCommits {
		t.Errorf("jobs ran again after their success was written: %v %v", v.breachIDs, tv.breachIDs)
	}
	if v.notDone > 0 {
		t.Errorf("%d jobs did not succeed", v.notDone)
	}
	if len(doubled) > 0 {
		t.Errorf("periodic ticks fired twice: %v", doubled)
	}
}

// tickExecutions returns the ledger's executions of the periodic kind's
// jobs (the jobs' database says which jobs those are).
func tickExecutions(t *testing.T, ledger, jobs *pgxpool.Pool) map[uuid.UUID][]execution {
	t.Helper()
	all := executions(t, ledger)
	out := map[uuid.UUID][]execution{}
	for id := range jobStates(t, jobs, "tick") {
		if ex, ok := all[id]; ok {
			out[id] = ex
		}
	}
	return out
}

// hostResumes returns, per host, how long after start the first job that
// the new primary holds as claimed by it after promoted (the end of the
// promotion) was claimed. The new primary's rows, not the ledger's: with
// claims that commit without waiting for the standby
// (WithAsyncClaimsAndOutcomes), a host goes on claiming on the old
// primary until it stops, and the ledger records those claims, which the
// new primary never had; the host resumes on the new primary only when
// it reconnects, and a tick missed until then is the failover's.
func hostResumes(t *testing.T, newPrimary *pgxpool.Pool, start, promoted time.Time) map[string]time.Duration {
	t.Helper()
	rows, err := newPrimary.Query(context.Background(),
		`SELECT owner, min(attempted_at) FROM ax.jobs_all WHERE attempted_at > $1 AND owner <> '' GROUP BY owner`, promoted)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var node string
		var at time.Time
		if err := rows.Scan(&node, &at); err != nil {
			t.Fatal(err)
		}
		out[node] = at.Sub(start).Round(time.Millisecond)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// listenersOn counts the sessions on a server whose last statement was the
// pgstore listener's LISTEN or its probe (SELECT 1).
func listenersOn(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND (query LIKE 'LISTEN %' OR query = 'SELECT 1')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startLag returns the p99 of started_at - run_at over the executions
// matching where (the ledger's clock and the jobs' are this machine's).
func startLag(t *testing.T, ledger *pgxpool.Pool, where string, args ...any) time.Duration {
	t.Helper()
	var p99 float64
	if err := ledger.QueryRow(context.Background(), `SELECT coalesce(percentile_cont(0.99) WITHIN GROUP
(ORDER BY extract(epoch FROM started_at - run_at)), 0) FROM executions WHERE `+where, args...).Scan(&p99); err != nil {
		t.Fatal(err)
	}
	return time.Duration(p99 * float64(time.Second)).Round(time.Millisecond)
}

// waitQuiet waits until no work job is left to run.
func waitQuiet(t *testing.T, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var n int
		err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM ax.jobs WHERE kind = 'work' AND state IN ('scheduled', 'running', 'retrying')`).Scan(&n)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d work jobs still to run after %s (%v)", n, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
