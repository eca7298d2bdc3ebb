package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestEarlyDirectStart: with WithEarlyDirectStart a direct start's insert
// commits with synchronous_commit off, hands the claimed job to
// EarlyStart (once, the record InsertClaimed then returns), and
// InsertClaimed returns only once the WAL is flushed past that commit.
// A keyed job, a caller without EarlyStart and a Store without the
// option insert under the server's setting and call nothing; a job the
// insert does not claim (another of its kind is due) is committed early
// but started by no one. A trigger records the setting each insert ran
// under; EarlyStart reads the WAL's insert position, which the flush
// position must have reached when InsertClaimed returns.
func TestEarlyDirectStart(t *testing.T) {
	cases := []struct {
		name      string
		option    bool
		noEarly   bool // the caller passes no EarlyStart
		key       string
		dueBefore bool // another job of the kind is due and waiting
		wantSync  string
		wantEarly bool
		wantClaim bool
	}{
		{name: "Plain", option: true, wantSync: "off", wantEarly: true, wantClaim: true},
		{name: "UniqueKey", option: true, key: "k1", wantSync: "on", wantClaim: true},
		{name: "NoEarlyStart", option: true, noEarly: true, wantSync: "on", wantClaim: true},
		{name: "WithoutOption", wantSync: "on", wantClaim: true},
		{name: "NotClaimed", option: true, dueBefore: true, wantSync: "off"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			var opts []pgstore.Option
			if c.option {
				opts = append(opts, pgstore.WithEarlyDirectStart())
			}
			pool, s := newPoolStore(t, opts...)
			if c.dueBefore {
				_, err := s.Insert(ctx, []store.InsertParams{job("early")})
				require.NoError(t, err)
			}
			_, err := pool.Exec(ctx, `CREATE TABLE public.commit_seen (sync text);
				CREATE FUNCTION public.record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					INSERT INTO public.commit_seen VALUES (current_setting('synchronous_commit'));
					RETURN NULL;
				END $$;
				CREATE TRIGGER record_commit AFTER INSERT ON ax.jobs
					FOR EACH ROW EXECUTE FUNCTION public.record_commit()`)
			require.NoError(t, err)

			p := job("early")
			p.UniqueKey = c.key
			var (
				calls   int
				early   *store.JobRecord
				written string // the WAL's insert position once the job was handed over
			)
			claim := &store.InsertClaim{Owner: "n", LeaseDuration: time.Minute}
			if !c.noEarly {
				claim.EarlyStart = earlyFunc(func(rec *store.JobRecord) {
					calls++
					early = rec
					require.NoError(t, pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&written))
				})
			}
			res, rec, err := s.InsertClaimed(ctx, &p, claim)
			require.NoError(t, err)
			require.Equal(t, p.ID, res.ID)
			require.Equal(t, c.wantClaim, rec != nil, "claimed")
			if c.wantEarly {
				require.Equal(t, 1, calls, "EarlyStart calls")
				require.Same(t, rec, early, "EarlyStart's record is the one returned")
				var flushed bool
				require.NoError(t, pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, written).Scan(&flushed))
				require.True(t, flushed, "InsertClaimed returned before the WAL was flushed past its insert")
			} else {
				require.Zero(t, calls, "EarlyStart calls")
			}

			rows, _ := pool.Query(ctx, `DELETE FROM public.commit_seen RETURNING sync`)
			seen, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{c.wantSync}, seen, "synchronous_commit of the insert")
			var sync string
			for _, conn := range pool.AcquireAllIdle(ctx) {
				err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sync)
				conn.Release()
				require.NoError(t, err)
				require.Equal(t, "on", sync, "the setting outlived the insert's transaction")
			}
		})
	}
}

// earlyFunc is a store.EarlyStarter made of a func.
type earlyFunc func(rec *store.JobRecord)

func (f earlyFunc) StartEarly(rec *store.JobRecord) { f(rec) }

// TestEarlyDirectStartRefused: a role that may not run the flush's
// statement fails New with WithEarlyDirectStart, rather than every
// direct start; without the option the same role's Store opens.
func TestEarlyDirectStartRefused(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DSN(t)
	admin := pgtest.PoolFor(t, dsn)
	role := "ax_noemit_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Skipf("cannot create a role to test with (%v): run as a PostgreSQL superuser", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = admin.Exec(ctx, `DROP ROLE `+role)
	})
	_, err := admin.Exec(ctx, `GRANT USAGE ON SCHEMA ax TO `+role+`;
		GRANT ALL ON ALL TABLES IN SCHEMA ax TO `+role+`;
		REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC`)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, ""
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Skipf("cannot log in as a new role without a password (%v)", err)
	}

	_, err = pgstore.New(ctx, pool, pgstore.WithoutMigrate(), pgstore.WithEarlyDirectStart())
	require.ErrorContains(t, err, "WithEarlyDirectStart")
	s, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate())
	require.NoError(t, err)
	require.NoError(t, s.Close())
}
