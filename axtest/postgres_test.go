package axtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

type invoiceArgs struct {
	Order int `json:"order"`
}

func (invoiceArgs) Kind() string { return "invoice.send" }

// placeOrder is "the user's code": it writes the order and schedules its
// invoice in one transaction, in the application's own table.
func placeOrder(ctx context.Context, s *ax.Scheduler, pool *pgxpool.Pool, id int, commit bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
		return err
	}
	if _, err := s.ScheduleTx(ctx, tx, invoiceArgs{}.Kind(), invoiceArgs{Order: id}); err != nil {
		return err
	}
	if !commit {
		return nil
	}
	return tx.Commit(ctx)
}

// TestPostgresScheduleTx: a ScheduleTx call beside the application's own
// writes is tested without writing SQL for the job: the test gets its own
// schemas, creates its table, and asserts what was scheduled once the
// transaction commits (and that a rolled back one left nothing).
func TestPostgresScheduleTx(t *testing.T) {
	t.Parallel()
	s, pool := axtest.NewPostgresScheduler(t, ax.Config{})
	ctx := t.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY)`)
	require.NoError(t, err)

	require.NoError(t, placeOrder(ctx, s, pool, 1, false))
	axtest.RequireNotScheduled[invoiceArgs](t, s)
	require.NoError(t, placeOrder(ctx, s, pool, 2, true))
	j := axtest.RequireScheduled[invoiceArgs](t, s)
	require.Equal(t, 2, j.Args.Order)

	var sent []int
	require.NoError(t, ax.HandleArgs(s, func(_ context.Context, _ *ax.Job, a invoiceArgs) error {
		sent = append(sent, a.Order)
		return nil
	}))
	require.Equal(t, 1, axtest.Work(t, s))
	require.Equal(t, []int{2}, sent)
}

// TestPostgresIsolatesTheApplicationsTables: each test's tables land in a
// schema of its own, apart from AX's (an application table may be named
// like one of AX's) and from public, and are dropped when the test ends.
func TestPostgresIsolatesTheApplicationsTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schemas := make([]string, 2)
	for i := range schemas {
		t.Run("test", func(t *testing.T) {
			st, pool := axtest.Postgres(t)
			_, err := pool.Exec(ctx, `CREATE TABLE jobs (id int PRIMARY KEY, note text)`) // AX has a "jobs" table too
			require.NoError(t, err, "a table of the test's, named like one of AX's")
			_, err = pool.Exec(ctx, `INSERT INTO jobs VALUES (1, 'mine')`)
			require.NoError(t, err)
			var schema string
			require.NoError(t, pool.QueryRow(ctx,
				`SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'jobs'::regclass`).Scan(&schema))
			require.Regexp(t, `^axtest_[0-9a-f]{16}_app$`, schema)
			require.NotEqual(t, st.Schema(), schema)
			schemas[i] = schema

			s := newPGScheduler(t, st)
			_, err = ax.Enqueue(ctx, s, invoiceArgs{Order: 1})
			require.NoError(t, err)
			axtest.RequireScheduled[invoiceArgs](t, s)
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
			require.Equal(t, 1, n, "the test's table holds its own row, not AX's job")
		})
	}
	require.NotEqual(t, schemas[0], schemas[1], "each test has its own schema")

	conn := rawConn(t)
	for _, schema := range schemas {
		var left bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&left))
		require.False(t, left, "schema %s outlived its test", schema)
	}
}

// newPGScheduler is a Scheduler on st, not started, stopped at the end.
func newPGScheduler(t *testing.T, st *pgstore.Store) *ax.Scheduler {
	t.Helper()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return s
}

// rawConn is a connection to the test database with no search_path of a
// test's, closed at the end.
func rawConn(t *testing.T) *pgx.Conn {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = axtest.DefaultDatabaseURL
	}
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestPostgresPeriodic: Work declares and fires schedules on pgstore too,
// here one another host last fired two hours ago (in the database's
// clock), which resumes from there: one job, for the latest tick.
func TestPostgresPeriodic(t *testing.T) {
	t.Parallel()
	s, _ := axtest.NewPostgresScheduler(t, ax.Config{})
	ctx := t.Context()
	ps := s.Store().(store.PeriodicStore)
	now, err := s.Store().Now(ctx)
	require.NoError(t, err)
	last := now.Add(-2 * time.Hour).Truncate(time.Hour)
	_, err = ps.FirePeriodic(ctx, &store.FirePeriodicParams{Name: "digest", Spec: "@hourly",
		Ticks: []store.PeriodicTick{{At: last}}})
	require.NoError(t, err)
	var ticks []time.Time
	require.NoError(t, ax.HandleArgs(s, func(_ context.Context, j *ax.Job, _ digestArgs) error {
		ticks = append(ticks, j.Tick)
		return nil
	}))
	require.NoError(t, s.Every("digest", "@hourly", digestArgs{Team: "ops"}))
	require.NoError(t, s.Every("never-yet", "@yearly", nil))

	require.Equal(t, 1, axtest.Work(t, s))
	require.Len(t, ticks, 1)
	require.True(t, ticks[0].After(last.Add(time.Hour)), "tick %s: the latest of those missed since %s", ticks[0], last)
	scheds, err := s.Admin().Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, scheds, 2, "Work declared both")
	require.Equal(t, "digest", scheds[0].Kind, "with their templates")
	require.Equal(t, "never-yet", scheds[1].Kind)
	require.True(t, scheds[0].LastTick.Equal(ticks[0]))
}
