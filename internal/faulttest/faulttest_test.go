package faulttest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestSteadyState runs 10k jobs (100k in soak mode) with delays over 5s and
// mixed priorities through 3 processes: each runs exactly once, none early.
func TestSteadyState(t *testing.T) {
	sideBySide(t)
	n := 10_000
	if soak() {
		n = 100_000
	}
	c := newCluster(t)
	for i := range 3 {
		c.start(fmt.Sprintf("steady-%d", i), "")
	}
	jobs := mixed(n, 5*time.Second, 0)
	for i := range jobs {
		if i%10 == 0 {
			jobs[i].ms = 20
		}
	}
	c.schedule(jobs)
	took := c.waitAllSucceeded(3 * time.Minute)
	tl := c.tally()
	p50, p99, maxLag, early := c.lagStats("true")
	figure(t, "%d jobs in %s (%.0f jobs/s incl. 5s of delays), executions %d, duplicates %d, lost %d, start lag p50 %s p99 %s max %s",
		tl.jobs, took.Round(time.Millisecond), float64(n)/took.Seconds(), tl.executions, tl.duplicated, tl.lost, p50, p99, maxLag)
	require.Equal(t, n, tl.jobs)
	require.Equal(t, n, tl.executions, "every job exactly once")
	require.Zero(t, tl.duplicated)
	require.Zero(t, tl.lost)
	require.Zero(t, early, "jobs started before their run_at")
	rows, err := c.pool.Query(context.Background(), `SELECT node, count(*) FROM executions GROUP BY node ORDER BY node`)
	require.NoError(t, err)
	for rows.Next() {
		var node string
		var cnt int
		require.NoError(t, rows.Scan(&node, &cnt))
		figure(t, "node %s ran %d jobs", node, cnt)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, c.count(`SELECT count(*) FROM ax.nodes WHERE metadata->>'state' = 'running'`), "3 nodes registered")
	require.Equal(t, 1, c.count(`SELECT count(*) FROM ax.leader WHERE expires_at > now()`))
}

// TestKill SIGKILLs the maintenance leader (or, when the other hosts
// claimed every job, the busiest host) while it runs jobs: no job is
// lost, only the jobs it held run again, on the other hosts, once their
// leases expire. Every host rescues expired leases, so failover does not
// wait for a new leader: with a 2s lease and a 500ms rescue interval (and
// the default 10s leader TTL, which would dominate if only the leader
// rescued) it is at most 3s; soak mode also measures the defaults (10s
// lease, 1s rescue interval), at most 12s.
func TestKill(t *testing.T) {
	t.Run("FastLease", func(t *testing.T) {
		testKill(t, newCluster(t), []string{"-lease", "2s", "-rescue", "500ms"}, 3*time.Second)
	})
	t.Run("Defaults", func(t *testing.T) {
		if !soak() {
			t.Skip("the kill with default lease and leader TTL runs with AX_SOAK=1")
		}
		testKill(t, newCluster(t), nil, 12*time.Second)
	})
}

// testKill kills one of three hosts of c while it runs jobs: see TestKill.
func testKill(t *testing.T, c *cluster, flags []string, bound time.Duration) {
	var procs []*proc
	for i := range 3 {
		procs = append(procs, c.start(fmt.Sprintf("kill-%d", i), "", append([]string{"-workers", "40"}, flags...)...))
	}
	// 60 jobs of 4-7s, due over 1s, on 120 slots: all run at once, so a
	// rescued job starts as soon as it is rescued. Long enough that, on a
	// loaded machine (CI runs the deploy scenarios beside this one), the
	// victim still runs some when every job has been claimed: with 2-5s
	// jobs CI once saw that moment pass before the check below caught it.
	jobs := mixed(60, time.Second, 0)
	for i := range jobs {
		jobs[i].ms = 4000 + (i%4)*1000
	}
	c.schedule(jobs)
	var victim *proc
	c.waitFor("a leader", 20*time.Second, func() bool {
		for _, p := range procs {
			if p.leader() {
				victim = p
				return true
			}
		}
		return false
	})
	// The victim is the leader if it runs jobs once every job is claimed;
	// on a loaded machine (CI runs the deploy scenarios beside this one)
	// the other two hosts, 80 slots for 60 jobs, sometimes claim them all,
	// and then the busiest host dies instead: the rescue is what is
	// measured, and a leader's death is covered by the leadership passing
	// on below whenever the victim led.
	running := func(p *proc) int {
		return c.count(`SELECT count(*) FROM executions WHERE node = $1 AND finished_at IS NULL`, p.name)
	}
	seen := map[[2]int]bool{}
	c.waitFor("every job to be claimed and a host to run some", 20*time.Second, func() bool {
		waiting := c.count(`SELECT count(*) FROM ax.jobs_all WHERE state IN ('scheduled', 'retrying')`)
		if waiting > 0 {
			return false
		}
		if running(victim) >= 5 {
			return true
		}
		busiest, most := victim, running(victim)
		for _, p := range procs {
			if n := running(p); n > most {
				busiest, most = p, n
			}
		}
		if k := [2]int{waiting, most}; !seen[k] { // shown if the wait times out
			seen[k] = true
			t.Logf("%d jobs not yet claimed; the leader %s runs %d, %s runs %d", waiting, victim.name, running(victim), busiest.name, most)
		}
		if most >= 5 {
			t.Logf("the leader %s runs no job: killing %s, which runs %d", victim.name, busiest.name, most)
			victim = busiest
			return true
		}
		return false
	})
	killedAt := c.dbNow()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 10*time.Second)
	// The jobs the victim held, as seen just after the kill: a lower bound,
	// since on a loaded machine a job whose lease the victim failed to
	// extend in time may already have been rescued.
	held := c.count(`SELECT count(*) FROM ax.jobs_all WHERE state = 'running' AND owner = $1`, victim.name)

	c.waitAllSucceeded(2 * time.Minute)
	// What was rescued from the victim, counted once every job ended: each
	// such job carries the rescue's error naming its owner. Those whose
	// handler had started ran on it.
	rescuedFromVictim := `SELECT j.id FROM ax.jobs_all j WHERE jsonb_array_length(j.errors) > 0
		AND j.errors->0->>'error' LIKE '%owner ' || $1 || ' %'`
	rescued := c.count(`SELECT count(*) FROM (`+rescuedFromVictim+`) r`, victim.name)
	heldStarted := c.count(`SELECT count(*) FROM (`+rescuedFromVictim+`) r
		WHERE EXISTS (SELECT 1 FROM executions e WHERE e.job_id = r.id AND e.node = $1)`, victim.name)
	tl := c.tally()
	require.Zero(t, tl.lost, "jobs lost")
	require.Equal(t, len(jobs), tl.jobs)
	// Every job that ran twice first ran on the victim, and only there.
	require.Zero(t, c.count(`SELECT count(*) FROM (SELECT job_id FROM executions GROUP BY job_id
		HAVING count(*) > 1 AND count(*) FILTER (WHERE node <> $1) <> 1) x`, victim.name),
		"a job ran more than once without the victim holding it")
	require.Zero(t, c.count(`SELECT count(*) FROM ax.jobs_all WHERE owner = $1`, victim.name), "a job ended on the dead node")

	var minR, maxR float64
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT coalesce(min(r), 0), coalesce(max(r), 0) FROM (
		SELECT extract(epoch FROM (errors->0->>'at')::timestamptz - $1) AS r FROM ax.jobs_all
		WHERE jsonb_array_length(errors) > 0) x`, killedAt).Scan(&minR, &maxR))
	var minF, avgF, maxF float64
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT coalesce(min(f), 0), coalesce(avg(f), 0), coalesce(max(f), 0) FROM (
		SELECT extract(epoch FROM min(e.started_at) - $2) AS f FROM executions e
		WHERE e.node <> $1 AND e.job_id IN (SELECT job_id FROM executions WHERE node = $1 AND started_at < $2)
		GROUP BY e.job_id) x`, victim.name, killedAt).Scan(&minF, &avgF, &maxF))
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)).Round(time.Millisecond) }
	figure(t, "killed leader %s holding %d jobs; %d ran again elsewhere; rescued %s-%s after the kill; failover (kill to re-run start) min %s avg %s max %s (bound %s, flags %v); lost %d",
		victim.name, held, tl.duplicated, sec(minR), sec(maxR), sec(minF), sec(avgF), sec(maxF), bound, flags, tl.lost)
	require.Equal(t, heldStarted, tl.duplicated, "every job the victim was running ran again")
	require.GreaterOrEqual(t, rescued, held, "every job the victim held when it died was rescued")
	require.Equal(t, rescued, c.count(`SELECT count(*) FROM ax.jobs_all WHERE jsonb_array_length(errors) > 0`),
		"only the victim's jobs were rescued")
	require.LessOrEqual(t, sec(maxF), bound, "failover slower than lease + rescue interval")
	// The leadership (pruning, node reaping) passes on too, later: once the
	// dead leader's lease lapses (LeaderTTL, 10s by default).
	c.waitFor("a survivor to take the leadership", 20*time.Second, func() bool {
		for _, p := range procs {
			if p != victim && p.leader() {
				return true
			}
		}
		return false
	})
	others := 0
	for _, p := range procs {
		if p != victim && p.leader() {
			others++
		}
	}
	require.Equal(t, 1, others, "exactly one survivor took the leadership")
}

// TestZombie pauses (SIGSTOP) the leader past its lease while it runs jobs,
// lets the other host take them over, then resumes it (SIGCONT): the
// zombie's handlers are cancelled or their late results refused, and every
// job ends as its new owner wrote it.
func TestZombie(t *testing.T) {
	sideBySide(t)
	c := newCluster(t)
	zombie := c.start("zombie", "", fastFailover...)
	zombie.waitLine(t, "EVENT leader true", 10*time.Second)
	// Long jobs are still running when the zombie wakes; short ones end
	// while it sleeps, so their results arrive late.
	var jobs []job
	for range 4 {
		jobs = append(jobs, job{ms: 9000}, job{ms: 2500})
	}
	ids := c.schedule(jobs)
	c.waitFor("the zombie to run every job", 10*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE node = 'zombie'`) == len(jobs)
	})
	other := c.start("other", "", fastFailover...)
	zombie.signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()
	c.waitFor("the other host to take every job over", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE node = 'other'`) == len(jobs)
	})
	takeover := time.Since(stoppedAt)
	// Every host rescues expired leases, so the jobs can move before the
	// leadership does (its TTL may outlast the lease); it must follow.
	c.waitFor("the other host to take the leadership over", 20*time.Second, other.leader)
	zombie.signal(t, syscall.SIGCONT)
	c.waitFor("the zombie to notice every lost lease", 20*time.Second, func() bool {
		return len(zombie.has("EVENT lease_lost ")) >= len(jobs)
	})
	c.waitAllSucceeded(30 * time.Second)

	cancelled := c.count(`SELECT count(*) FROM executions WHERE node = 'zombie' AND outcome LIKE 'cancelled:%lease lost%'`)
	late := c.count(`SELECT count(*) FROM executions WHERE node = 'zombie' AND outcome = 'ok'`)
	figure(t, "takeover %s after SIGSTOP; zombie handlers cancelled %d, late results refused %d, of %d jobs",
		takeover.Round(time.Millisecond), cancelled, late, len(jobs))
	require.Equal(t, len(jobs), cancelled+late)
	require.GreaterOrEqual(t, cancelled, 4, "the long jobs' handlers were cancelled")
	for _, id := range ids {
		rec, err := c.ax.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, ax.StateSucceeded, rec.State)
		require.Equal(t, 2, rec.Attempt, "job %s", id)
		require.Equal(t, "ok", outcome(t, c, id, "other"), "the new owner's execution finished")
	}
	require.Equal(t, len(jobs), c.count(`SELECT count(*) FROM ax.jobs_all WHERE owner = 'other' AND state = 'succeeded'`),
		"every job's final state is the new owner's")
	require.False(t, zombie.leader(), "the zombie stepped down")
}

func outcome(t *testing.T, c *cluster, id uuid.UUID, node string) string {
	t.Helper()
	var o *string
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT outcome FROM executions WHERE job_id = $1 AND node = $2`, [16]byte(id), node).Scan(&o))
	if o == nil {
		return ""
	}
	return *o
}

// TestGraceful stops (SIGTERM → Stop with a 1s deadline) a process mid-run,
// with the default 10s lease: short jobs finish, long ones are handed back
// and start elsewhere at once, not after the lease; the node is listed as
// stopped and a leader remains.
func TestGraceful(t *testing.T) { testGraceful(t, newCluster(t)) }

// testGraceful stops one of three hosts of c with SIGTERM while it runs
// jobs: see TestGraceful.
func testGraceful(t *testing.T, c *cluster) {
	var procs []*proc
	for i := range 3 {
		procs = append(procs, c.start(fmt.Sprintf("graceful-%d", i), "", "-workers", "20", "-stop-timeout", "1s"))
	}
	victim := procs[0]
	var jobs []job
	for i := range 30 {
		jobs = append(jobs, job{ms: 6000, delay: time.Duration(i) * 10 * time.Millisecond})
	}
	jobs = append(jobs, mixed(300, 3*time.Second, 300)...)
	c.schedule(jobs)
	c.waitFor("the victim to run long jobs", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions e JOIN ax.jobs_all j ON j.id = e.job_id
			WHERE e.node = $1 AND e.finished_at IS NULL AND j.payload->>'ms' = '6000'`, victim.name) >= 3
	})
	time.Sleep(500 * time.Millisecond) // let short jobs be mid-run too
	termAt := c.dbNow()
	victim.signal(t, syscall.SIGTERM)
	victim.waitLine(t, "STOPPED", 20*time.Second)
	// At once: when Stop returns, no job is left running under the
	// victim's lease; each handed-back job is claimable (or already
	// claimed elsewhere), not waiting for its lease to expire.
	heldAfterStop := c.count(`SELECT count(*) FROM ax.jobs_all WHERE state = 'running' AND owner = $1`, victim.name)
	victim.wait(t, 10*time.Second)
	c.waitAllSucceeded(time.Minute)

	tl := c.tally()
	// Handed back is what Stop released to the store (its events), not
	// what the handlers saw: a handler that ends its work just as Stop's
	// deadline passes records "ok" and is still handed back, having not
	// returned, and rightly runs again elsewhere (CI saw 9 handed back, 8
	// of them cancelled).
	var handedBackIDs []string
	for _, l := range victim.has("EVENT handed_back ") {
		handedBackIDs = append(handedBackIDs, strings.TrimPrefix(l, "EVENT handed_back "))
	}
	handedBack := len(handedBackIDs)
	// A job taken ahead of the victim's free workers (takeahead.go) and
	// still waiting for one is handed back unstarted: it runs once, on
	// another host. Only the handed-back jobs that started here run twice.
	startedHere := c.count(`SELECT count(DISTINCT job_id) FROM executions WHERE node = $1 AND job_id = ANY($2::uuid[])`, victim.name, handedBackIDs)
	cancelledStopping := c.count(`SELECT count(*) FROM executions WHERE node = $1 AND outcome LIKE 'cancelled:%stopping%'`, victim.name)
	finishedInGrace := c.count(`SELECT count(*) FROM executions WHERE node = $1 AND outcome = 'ok' AND finished_at > $2`, victim.name, termAt)
	var maxRestart float64
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT coalesce(max(extract(epoch FROM s - $2)), 0) FROM (
		SELECT min(e.started_at) AS s FROM executions e
		WHERE e.node <> $1 AND e.job_id = ANY($3::uuid[])
		GROUP BY e.job_id) x`, victim.name, termAt, handedBackIDs).Scan(&maxRestart))
	restart := time.Duration(maxRestart * float64(time.Second)).Round(time.Millisecond)
	figure(t, "SIGTERM: %d jobs finished within the 1s grace, %d handed back (%d of them started here, %d handlers cancelled by it); slowest re-run started %s after SIGTERM (lease %s); duplicates %d (the handed-back ones that started), lost %d",
		finishedInGrace, handedBack, startedHere, cancelledStopping, restart, ax.DefaultLeaseDuration, tl.duplicated, tl.lost)
	require.Zero(t, tl.lost)
	require.Positive(t, cancelledStopping)
	require.LessOrEqual(t, cancelledStopping, startedHere, "a handler cancelled by Stop whose job was not handed back")
	require.Equal(t, startedHere, tl.duplicated, "only handed-back jobs that started here ran twice")
	require.Zero(t, c.count(`SELECT count(*) FROM executions WHERE node = $1 AND outcome IS NULL`, victim.name), "an execution was abandoned")
	require.Zero(t, heldAfterStop, "a job still held the victim's lease when Stop returned")
	// And no re-run waited for a lease: one not handed back is rescued
	// once its lease expires, at the earliest two thirds of a lease after
	// SIGTERM (the heartbeat extends leases every third of one). How soon
	// before that the re-runs start is the other hosts' queue, not the
	// hand-back: the scenario is over capacity (30 jobs of 6 s and 30
	// slots' worth of short ones for the 40 slots left), handed-back jobs
	// of low priority wait behind the short ones that outrank them, and
	// when the victim had taken most of the long jobs, they wait for the
	// other hosts' long jobs to end, about 5.3 s after SIGTERM (CI; on a
	// quiet machine about 2.2 s, with the victim holding a few long jobs).
	require.Less(t, restart, ax.DefaultLeaseDuration*2/3, "a handed-back job waited for its lease")
	require.Equal(t, "stopped", nodeState(t, c, victim.name))
	c.waitFor("a new leader", 10*time.Second, func() bool { return procs[1].leader() || procs[2].leader() })
}

func nodeState(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var s string
	require.NoError(t, c.synced().QueryRow(context.Background(), `SELECT coalesce(metadata->>'state', '') FROM ax.nodes WHERE name = $1`, name).Scan(&s))
	return s
}

// TestDatabaseFaults terminates every AX backend mid-run, and cuts one
// process's connections for 5s through a proxy: every process recovers by
// itself and nothing is lost.
func TestDatabaseFaults(t *testing.T) {
	sideBySide(t)
	t.Run("TerminateBackends", func(t *testing.T) {
		c := newCluster(t)
		var procs []*proc
		for i := range 3 {
			procs = append(procs, c.start(fmt.Sprintf("term-%d", i), ""))
		}
		jobs := mixed(3000, 8*time.Second, 50)
		c.schedule(jobs)
		time.Sleep(3 * time.Second)
		at := c.dbNow()
		var killed int
		require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()) x`).Scan(&killed))
		c.waitAllSucceeded(time.Minute)
		tl := c.tally()
		var worst time.Duration
		for _, p := range procs {
			r := c.recovery(p.name, at)
			worst = max(worst, r)
		}
		figure(t, "terminated %d backends; slowest process ran its next job %s later; duplicates %d, lost %d of %d",
			killed, worst, tl.duplicated, tl.lost, tl.jobs)
		require.Positive(t, killed)
		require.Zero(t, tl.lost)
		require.Zero(t, tl.duplicated)
		require.Equal(t, tl.jobs, tl.executions)
	})
	t.Run("ProxyCut", func(t *testing.T) {
		c := newCluster(t)
		px, viaProxy := newProxy(t, c.dsn)
		c.start("direct-0", "")
		c.start("direct-1", "")
		cut := c.start("proxied", viaProxy)
		jobs := mixed(3000, 10*time.Second, 50)
		c.schedule(jobs)
		c.waitFor("the proxied process to run jobs", 10*time.Second, func() bool {
			return c.count(`SELECT count(*) FROM executions WHERE node = $1`, cut.name) > 50
		})
		cutAt := c.dbNow()
		px.cut(5 * time.Second)
		healedAt := cutAt.Add(5 * time.Second)
		c.waitAllSucceeded(time.Minute)
		tl := c.tally()
		r := c.recovery(cut.name, healedAt)
		figure(t, "cut 5s; the proxied process ran its next job %s after the cut ended; duplicates %d, lost %d of %d",
			r, tl.duplicated, tl.lost, tl.jobs)
		require.Zero(t, tl.lost)
		require.Zero(t, tl.duplicated)
		require.Equal(t, tl.jobs, tl.executions)
		require.Positive(t, c.count(`SELECT count(*) FROM executions WHERE node = $1 AND started_at > $2`, cut.name, healedAt),
			"the proxied process never ran a job after the cut")
		require.Zero(t, c.count(`SELECT count(*) FROM executions WHERE node = $1 AND started_at BETWEEN $2 AND $3`,
			cut.name, cutAt.Add(200*time.Millisecond), healedAt.Add(-200*time.Millisecond)),
			"the proxied process reached the database during the cut")
	})
}

// recovery returns how long after at the node started its next execution.
func (c *cluster) recovery(node string, at time.Time) time.Duration {
	c.t.Helper()
	var s float64
	require.NoError(c.t, c.pool.QueryRow(context.Background(),
		`SELECT coalesce(extract(epoch FROM min(started_at) - $2), -1) FROM executions WHERE node = $1 AND started_at > $2`,
		node, at).Scan(&s))
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// TestClockSkew runs one process 30s ahead and one 30s behind: no job starts
// before its run_at (database clock), none runs twice, and the skewed hosts
// start jobs about as promptly as the true one.
func TestClockSkew(t *testing.T) {
	c := newCluster(t)
	offsets := map[string]string{"skew-ahead": "30s", "skew-behind": "-30s", "skew-none": "0s"}
	for name, off := range offsets {
		c.start(name, "", "-clock-offset", off)
	}
	c.schedule(mixed(2000, 8*time.Second, 10))
	c.waitAllSucceeded(time.Minute)
	tl := c.tally()
	require.Zero(t, tl.lost)
	require.Zero(t, tl.duplicated)
	// Every host takes a share: a host whose claim window is narrower
	// than another's widens it once it loses a race (claimer.go,
	// lostRace). Before that, CI under load once saw 1,998 of the 2,000
	// jobs on skew-ahead and none on skew-behind, which then had no
	// figures; loaded runs since give each host 600-710.
	//
	// A host that trusted its own clock would start jobs 30 s early (the
	// one ahead: early) or 30 s late (the one behind). Lateness is bounded
	// at half the skew, which catches that and leaves room for a loaded
	// machine: with other test packages beside (CI), every host, the true
	// one too, has been seen 5-8 s late at worst (p50 0.5-1.9 s, all three
	// alike). The skewed hosts' median must stay near the true one's.
	trueP50, _, _, _ := c.lagStats("node = $1", "skew-none")
	for name, off := range offsets {
		p50, p99, maxLag, early := c.lagStats("node = $1", name)
		n := c.count(`SELECT count(*) FROM executions WHERE node = $1`, name)
		figure(t, "%s (clock %s): %d jobs, early %d, start lag p50 %s p99 %s max %s", name, off, n, early, p50, p99, maxLag)
		require.Zero(t, early, "%s started a job early", name)
		require.Less(t, maxLag, 15*time.Second, "%s started jobs late", name)
		require.Less(t, p50, trueP50+2*time.Second, "%s started jobs later than the host with the true clock", name)
		require.GreaterOrEqual(t, n, tl.jobs/10, "%s ran less than a tenth of the jobs", name)
	}
	figure(t, "duplicates %d, lost %d of %d", tl.duplicated, tl.lost, tl.jobs)
}

// TestPeriodic runs 3 processes declaring the same "@every 1s" schedule
// for 15 ticks (65 in soak mode), killing and restarting one in the middle:
// exactly one job per tick.
func TestPeriodic(t *testing.T) {
	if _, ok := reflect.TypeFor[*ax.Scheduler]().MethodByName("Every"); !ok {
		t.Skip("Scheduler.Every has not landed in this tree: the periodic scenario is written and skipped")
	}
	testPeriodic(t, newCluster(t))
}

// testPeriodic runs a periodic schedule on three hosts of c, one killed
// and restarted, one 30 s ahead: see TestPeriodic.
func testPeriodic(t *testing.T, c *cluster) {
	ticks := 15
	if soak() {
		ticks = 65
	}
	args := []string{"-periodic-name", "tick", "-periodic-spec", "@every 1s"}
	var procs []*proc
	for i := range 3 {
		extra := args
		if i == 2 {
			extra = append([]string{"-clock-offset", "30s"}, args...)
		}
		procs = append(procs, c.start(fmt.Sprintf("periodic-%d", i), "", append(extra, fastFailover...)...))
	}
	start := c.dbNow()
	time.Sleep(time.Duration(ticks/2) * time.Second)
	procs[0].signal(t, syscall.SIGKILL)
	procs[0].wait(t, 10*time.Second)
	c.start("periodic-0b", "", append(args, fastFailover...)...)
	time.Sleep(time.Duration(ticks-ticks/2) * time.Second)
	end := c.dbNow()

	// Ticks due within [start+1s, end-1s]: one job each (one unique key
	// per tick).
	var jobs, distinct, dupKeys int
	require.NoError(t, c.synced().QueryRow(context.Background(), `SELECT count(*), count(DISTINCT unique_key),
		(SELECT count(*) FROM (SELECT unique_key FROM ax.jobs_all WHERE kind = 'tick' GROUP BY unique_key HAVING count(*) > 1) d)
		FROM ax.jobs_all WHERE kind = 'tick' AND run_at BETWEEN $1 AND $2`,
		start.Add(time.Second), end.Add(-time.Second)).Scan(&jobs, &distinct, &dupKeys))
	execDup := c.count(`SELECT count(*) FROM (SELECT job_id FROM executions e JOIN ax.jobs_all j ON j.id = e.job_id
		WHERE j.kind = 'tick' GROUP BY job_id HAVING count(*) > 1) d`)
	var maxGap float64
	require.NoError(t, c.synced().QueryRow(context.Background(), `SELECT coalesce(max(g), 0) FROM (
		SELECT extract(epoch FROM run_at - lag(run_at) OVER (ORDER BY run_at)) AS g FROM ax.jobs_all
		WHERE kind = 'tick' AND run_at BETWEEN $1 AND $2) x`, start.Add(time.Second), end.Add(-time.Second)).Scan(&maxGap))
	figure(t, "%d ticks in %s: %d jobs, %d duplicate keys, %d executed twice, largest gap %.1fs (one process killed and restarted, one 30s ahead)",
		distinct, end.Sub(start).Round(time.Second), jobs, dupKeys, execDup, maxGap)
	require.Equal(t, distinct, jobs, "more than one job for a tick")
	require.Zero(t, dupKeys)
	require.GreaterOrEqual(t, distinct, ticks-3, "ticks were lost")
	require.LessOrEqual(t, maxGap, 1.5, "a tick was skipped")
}
