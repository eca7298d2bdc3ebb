package deploytest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// Kinds of the cluster scenario.
const (
	kindPlain    = "bouncer.plain"    // a no-op
	kindTx       = "bouncer.tx"       // writes a ledger row and ends with CompleteTx
	kindFlow     = "bouncer.flow"     // GlobalConcurrency(2) across the hosts
	kindPeriodic = "bouncer.periodic" // Every("@every 1s") declared by every host
	kindHeld     = "bouncer.held"     // paused, cancelled, resumed by the operator API
	flowLimit    = 2
	bouncerHosts = 3
)

// runs records what the hosts' handlers saw.
type runs struct {
	mu       sync.Mutex
	count    map[uuid.UUID]int           // handler calls per job
	lag      map[uuid.UUID]time.Duration // first start - run_at, per job
	ticks    map[time.Time]int           // periodic jobs per tick
	flowNow  atomic.Int32                // flow jobs running now
	flowPeak atomic.Int32
}

func newRuns() *runs {
	return &runs{count: map[uuid.UUID]int{}, lag: map[uuid.UUID]time.Duration{}, ticks: map[time.Time]int{}}
}

func (r *runs) record(j *ax.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count[j.ID] == 0 {
		r.lag[j.ID] = time.Since(j.RunAt)
	}
	r.count[j.ID]++
	if !j.Tick.IsZero() {
		r.ticks[j.Tick.UTC()]++
	}
}

// TestBouncerCluster runs three hosts whose pools go through PgBouncer in
// transaction mode on one database, while a client schedules jobs through
// it too (Schedule and ScheduleTx, one ScheduleTx rolled back), handlers
// end jobs with CompleteTx, a kind runs under a cluster-wide concurrency
// limit, every host declares one periodic schedule, and the operator API
// pauses, cancels and resumes. Once with the listener on a direct
// connection, once polling only (no direct connection at all). It prints
// jobs scheduled, run, lost and run twice, and the start lag, and fails on
// a lost job, a job run twice, a broken limit, or a periodic tick lost or
// doubled.
func TestBouncerCluster(t *testing.T) {
	noLeaks(t)
	b := startBouncer(t, pgtest.ServerURL())
	for _, tc := range []struct {
		name   string
		direct bool
	}{{"DirectListener", true}, {"PollingOnly", false}} {
		t.Run(tc.name, func(t *testing.T) { runBouncerCluster(t, b, tc.direct) })
	}
}

func runBouncerCluster(t *testing.T, b *bouncer, directListener bool) {
	ctx := context.Background()
	direct := directURL(t)
	pooled := b.url(t, direct)
	admin := poolOn(t, direct, pgx.QueryExecModeCacheStatement, 4) // the test's own reads, not through the pooler
	_, err := admin.Exec(ctx, `CREATE TABLE ledger (job_id uuid PRIMARY KEY, node text NOT NULL)`)
	require.NoError(t, err)

	newStore := func(pool *pgxpool.Pool) *pgstore.Store {
		opts := []pgstore.Option{pgstore.WithoutMigrate(), pgstore.WithTransactionPooler()}
		if directListener {
			opts = append(opts, pgstore.WithListenerConnString(direct))
		}
		st, err := pgstore.New(ctx, pool, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}

	r := newRuns()
	var hosts []*ax.Scheduler
	for i := range bouncerHosts {
		pool := poolOn(t, pooled, bouncerMode(), 8)
		s, err := ax.New(ax.Config{Store: newStore(pool), Node: fmt.Sprintf("host-%d", i),
			Workers: 20, PollInterval: time.Second})
		require.NoError(t, err)
		require.NoError(t, ax.Handle(s, kindPlain, func(ctx context.Context, j *ax.Job, _ struct{}) error {
			r.record(j)
			return nil
		}))
		require.NoError(t, ax.Handle(s, kindHeld, func(ctx context.Context, j *ax.Job, _ struct{}) error {
			r.record(j)
			return nil
		}))
		require.NoError(t, ax.Handle(s, kindTx, func(ctx context.Context, j *ax.Job, _ struct{}) error {
			r.record(j)
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(ctx, `INSERT INTO ledger (job_id, node) VALUES ($1, $2)`, [16]byte(j.ID), s.Node()); err != nil {
				return err
			}
			if err := s.CompleteTx(ctx, tx); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}))
		require.NoError(t, ax.Handle(s, kindFlow, func(ctx context.Context, j *ax.Job, _ struct{}) error {
			r.record(j)
			n := r.flowNow.Add(1)
			defer r.flowNow.Add(-1)
			for p := r.flowPeak.Load(); n > p && !r.flowPeak.CompareAndSwap(p, n); p = r.flowPeak.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			return nil
		}, ax.GlobalConcurrency(flowLimit)))
		require.NoError(t, ax.Handle(s, kindPeriodic, func(ctx context.Context, j *ax.Job, _ struct{}) error {
			r.record(j)
			return nil
		}))
		// MisfireRunAll: a tick every host found late (a loaded machine)
		// still runs, so any gap is a lost tick.
		require.NoError(t, s.Every("bouncer.tick", "@every 1s", struct{}{}, ax.JobKind(kindPeriodic), ax.Misfire(ax.MisfireRunAll(60))))
		hosts = append(hosts, s)
	}
	// The client schedules and operates; it is never started.
	clientPool := poolOn(t, pooled, bouncerMode(), 8)
	client, err := ax.New(ax.Config{Store: newStore(clientPool), Node: "client"})
	require.NoError(t, err)

	// The operator holds kindHeld back before the hosts start (a pause
	// reaches running hosts within a heartbeat).
	op := client.Admin()
	_, err = op.PauseKind(ctx, kindHeld)
	require.NoError(t, err)
	for _, s := range hosts {
		require.NoError(t, s.Start(ctx))
	}
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		var wg sync.WaitGroup
		for _, s := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.Stop(sctx); err != nil {
					t.Errorf("stop %s: %v", s.Node(), err)
				}
			}()
		}
		wg.Wait()
	}
	t.Cleanup(stopAll)

	var (
		scheduled  []uuid.UUID // must each run exactly once
		immediate  []uuid.UUID // due at once and not held back: their start lag is printed
		cancelled  uuid.UUID   // must never run
		rolledBack uuid.UUID   // scheduled in a rolled back transaction: must never exist
	)
	const rounds, perRound = 40, 10
	for round := range rounds {
		for i := range perRound {
			var (
				res ax.ScheduleResult
				err error
			)
			switch i % 5 {
			case 0, 1:
				res, err = client.Schedule(ctx, kindPlain, struct{}{}, ax.In(time.Duration(i)*50*time.Millisecond))
			case 2:
				res, err = client.Schedule(ctx, kindFlow, struct{}{})
			case 3:
				res, err = client.Schedule(ctx, kindHeld, struct{}{})
			case 4:
				tx, terr := clientPool.Begin(ctx)
				require.NoError(t, terr)
				res, err = client.ScheduleTx(ctx, tx, kindTx, struct{}{})
				require.NoError(t, err)
				err = tx.Commit(ctx)
			}
			require.NoError(t, err)
			scheduled = append(scheduled, res.ID)
			if i == 0 || i == 4 {
				immediate = append(immediate, res.ID)
			}
		}
		if round == rounds/2 {
			tx, err := clientPool.Begin(ctx)
			require.NoError(t, err)
			res, err := client.ScheduleTx(ctx, tx, kindPlain, struct{}{})
			require.NoError(t, err)
			require.NoError(t, tx.Rollback(ctx))
			rolledBack = res.ID
			held, err := client.Schedule(ctx, kindHeld, struct{}{})
			require.NoError(t, err)
			_, err = client.Cancel(ctx, held.ID)
			require.NoError(t, err)
			cancelled = held.ID
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Held jobs waited while their kind was paused; the operator sees them
	// through the pooler, then resumes the kind.
	n, err := op.Count(ctx, ax.JobFilter{Kinds: []string{kindHeld}, States: []ax.State{ax.StateScheduled}})
	require.NoError(t, err)
	require.EqualValues(t, rounds*perRound/5, n, "held jobs waiting while their kind is paused")
	require.Equal(t, 0, r.ran(kindHeldIDs(t, admin)), "a job of a paused kind ran")
	_, err = op.ResumeKind(ctx, kindHeld)
	require.NoError(t, err)

	deadline := time.Now().Add(30 * time.Second)
	for r.distinct(scheduled) < len(scheduled) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// Let the periodic schedule tick a little longer, then stop the hosts
	// so that every outcome is written.
	time.Sleep(time.Second)
	stopAll()

	nodes, err := op.Nodes(ctx)
	require.NoError(t, err)
	stats, err := op.Stats(ctx)
	require.NoError(t, err)
	list, err := op.List(ctx, ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{kindTx}}, Limit: 5})
	require.NoError(t, err)

	var succeeded, ledger int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE id = ANY($1) AND state = 'succeeded'`, pgtest.IDs(scheduled)).Scan(&succeeded))
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&ledger))
	var rolledBackRows, cancelledState int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE id = $1`, [16]byte(rolledBack)).Scan(&rolledBackRows))
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE id = $1 AND state = 'cancelled'`, [16]byte(cancelled)).Scan(&cancelledState))

	run, twice, lost := r.tally(scheduled)
	ticks, tickGaps, tickDoubled := r.tickTally()
	p50, p99, max := r.lagOf(immediate)
	t.Logf("FIGURE %s: scheduled %d, run %d, lost %d, run twice %d; succeeded in the store %d, ledger rows %d/%d; flow peak %d (limit %d); periodic ticks %d, lost %d, doubled %d; start lag of jobs due at once p50 %v p99 %v max %v; nodes %d, stats kinds queued %d, listed %d",
		t.Name(), len(scheduled), run, lost, twice, succeeded, ledger, rounds*perRound/5, r.flowPeak.Load(), flowLimit,
		ticks, tickGaps, tickDoubled, p50.Round(time.Millisecond), p99.Round(time.Millisecond), max.Round(time.Millisecond),
		len(nodes), len(stats.Queue), len(list.Jobs))

	require.Zero(t, lost, "jobs lost")
	require.Zero(t, twice, "jobs run twice")
	require.Equal(t, len(scheduled), succeeded, "scheduled jobs succeeded in the store")
	require.Equal(t, rounds*perRound/5, ledger, "CompleteTx's ledger rows")
	require.Zero(t, rolledBackRows, "a job scheduled in a rolled back transaction exists")
	require.Equal(t, 1, cancelledState, "the cancelled job is cancelled")
	require.Zero(t, r.count[cancelled], "the cancelled job ran")
	require.LessOrEqual(t, r.flowPeak.Load(), int32(flowLimit), "GlobalConcurrency broken")
	require.Positive(t, ticks, "periodic ticks")
	require.Zero(t, tickGaps, "periodic ticks lost")
	require.Zero(t, tickDoubled, "periodic ticks doubled")
	require.GreaterOrEqual(t, len(nodes), bouncerHosts, "nodes")
	require.NotEmpty(t, list.Jobs, "listing")
}

// kindHeldIDs returns the IDs of kindHeld's jobs.
func kindHeldIDs(t *testing.T, pool *pgxpool.Pool) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM ax.jobs_all WHERE kind = $1`, kindHeld)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		return id, row.Scan((*[16]byte)(&id))
	})
	require.NoError(t, err)
	return ids
}

// ran counts the jobs of ids that ran.
func (r *runs) ran(ids []uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		if r.count[id] > 0 {
			n++
		}
	}
	return n
}

func (r *runs) distinct(ids []uuid.UUID) int { return r.ran(ids) }

// tally counts the jobs of ids that ran, ran more than once, never ran.
func (r *runs) tally(ids []uuid.UUID) (run, twice, lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		switch c := r.count[id]; {
		case c == 0:
			lost++
		case c > 1:
			twice++
			run++
		default:
			run++
		}
	}
	return run, twice, lost
}

// tickTally counts the periodic ticks that ran, the seconds missing
// between the first and the last, and the ticks that ran more than once.
func (r *runs) tickTally() (ticks, gaps, doubled int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []time.Time
	for tick, n := range r.ticks {
		all = append(all, tick)
		if n > 1 {
			doubled++
		}
	}
	if len(all) == 0 {
		return 0, 0, 0
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	span := int(all[len(all)-1].Sub(all[0])/time.Second) + 1
	return len(all), span - len(all), doubled
}

// lagOf returns the start lag's p50, p99 and maximum over the jobs of ids
// that ran.
func (r *runs) lagOf(ids []uuid.UUID) (p50, p99, max time.Duration) {
	r.mu.Lock()
	var lags []time.Duration
	for _, id := range ids {
		if l, ok := r.lag[id]; ok {
			lags = append(lags, l)
		}
	}
	r.mu.Unlock()
	if len(lags) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lags)
	return lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
}
