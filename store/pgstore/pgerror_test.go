package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestDatabaseRefusalsAreInvalidParams checks that when PostgreSQL itself
// refuses a write's data (a check violation, a data exception on text no
// Validate method checks, or an ID that already exists), every write path returns an error wrapping
// both store.ErrInvalidParams and the *pgconn.PgError, and stores nothing.
// The check constraints stand for what an operator may add; Validate
// refuses everything the shipped schema would.
func TestDatabaseRefusalsAreInvalidParams(t *testing.T) {
	t.Parallel()
	const noForbiddenKind = `ALTER TABLE ax.jobs ADD CHECK (kind <> 'forbidden')`
	insert := func(ps ...store.InsertParams) func(context.Context, *testing.T, *pgstore.Store, *pgxpool.Pool) error {
		return func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
			_, err := s.Insert(ctx, ps)
			return err
		}
	}
	keyed := func(p store.InsertParams) store.InsertParams { p.UniqueKey = p.ID.String(); return p }
	// An explicit ID reused: a unique violation of the primary key.
	const existing = "01900000-0000-7000-8000-000000000001"
	const existingJob = `INSERT INTO ax.jobs (id, kind, payload, priority, run_at, scheduled_at, max_attempts)
		VALUES ('` + existing + `', 'k', '{}', 2, now(), now(), 3)`
	const notExisting = `SELECT count(*) FROM ax.jobs WHERE id <> '` + existing + `'`
	reuse := func(p store.InsertParams) store.InsertParams { p.ID = uuid.MustParse(existing); return p }
	cases := []struct {
		name       string
		constraint string // run before the call; "" for none
		call       func(ctx context.Context, t *testing.T, s *pgstore.Store, pool *pgxpool.Pool) error
		code       string // the SQLSTATE PostgreSQL answers with
		untouched  string // counts rows the call must not have written
	}{
		{"InsertOne", noForbiddenKind, insert(job("forbidden")), "23514", `SELECT count(*) FROM ax.jobs`},
		{"InsertManyCopy", noForbiddenKind, insert(job("ok"), job("forbidden")), "23514", `SELECT count(*) FROM ax.jobs`},
		{"InsertManyKeyed", noForbiddenKind, insert(keyed(job("ok")), keyed(job("forbidden"))), "23514", `SELECT count(*) FROM ax.jobs`},
		{"InsertTx", noForbiddenKind, func(ctx context.Context, t *testing.T, s *pgstore.Store, pool *pgxpool.Pool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the failed statement aborted it
			_, err = s.InsertTx(ctx, tx, []store.InsertParams{job("ok"), job("forbidden")})
			return err
		}, "23514", `SELECT count(*) FROM ax.jobs`},
		{"FirePeriodic", noForbiddenKind, func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
			j := job("forbidden")
			_, err := s.FirePeriodic(ctx, &store.FirePeriodicParams{Name: "p", Spec: "@every 1s",
				Ticks: []store.PeriodicTick{{At: time.Now().Add(-time.Hour), Job: &j}}})
			return err
		}, "23514", `SELECT (SELECT count(*) FROM ax.jobs) + (SELECT count(*) FROM ax.periodic)`},
		{"Finish", `ALTER TABLE ax.jobs ADD CHECK (jsonb_array_length(errors) = 0)`,
			func(ctx context.Context, t *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
				if _, err := s.Insert(ctx, []store.InsertParams{job("k")}); err != nil {
					t.Fatal(err)
				}
				res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
				if err != nil || len(res.Jobs) != 1 {
					t.Fatalf("claim: %v %v", res, err)
				}
				j := res.Jobs[0]
				_, err = s.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeRetry, Error: "e"}})
				return err
			}, "23514", `SELECT count(*) FROM ax.jobs WHERE state <> 'running'`},
		{"HeartbeatNode", `ALTER TABLE ax.nodes ADD CHECK (name <> 'forbidden')`,
			func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
				return s.HeartbeatNode(ctx, &store.NodeParams{Name: "forbidden", TTL: time.Minute})
			}, "23514", `SELECT count(*) FROM ax.nodes`},
		{"AcquireLeader", `ALTER TABLE ax.leader ADD CHECK (holder <> 'forbidden')`,
			func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
				_, err := s.AcquireLeader(ctx, &store.LeaderParams{Name: "l", Holder: "forbidden", TTL: time.Minute})
				return err
			}, "23514", `SELECT count(*) FROM ax.leader`},
		{"DeclarePeriodic", `ALTER TABLE ax.periodic ADD CHECK (spec <> 'forbidden')`,
			func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
				_, err := s.DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: "p", Spec: "forbidden"})
				return err
			}, "23514", `SELECT count(*) FROM ax.periodic`},
		{"InsertExistingID", existingJob, insert(job("ok"), reuse(job("ok"))), "23505", notExisting},
		{"InsertKeyedExistingID", existingJob, insert(keyed(job("ok")), keyed(reuse(job("ok")))), "23505", notExisting},
		{"InsertTxExistingID", existingJob, func(ctx context.Context, t *testing.T, s *pgstore.Store, pool *pgxpool.Pool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the failed statement aborted it
			_, err = s.InsertTx(ctx, tx, []store.InsertParams{job("ok"), reuse(job("ok"))})
			return err
		}, "23505", notExisting},
		{"InsertClaimedExistingID", existingJob, func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
			p := reuse(job("ok"))
			_, _, err := s.InsertClaimed(ctx, &p, &store.InsertClaim{Owner: "n", LeaseDuration: time.Minute})
			return err
		}, "23505", notExisting},
		{"StopNodeNUL", "", func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
			_, err := s.StopNode(ctx, "a\x00b")
			return err
		}, "22021", `SELECT count(*) FROM ax.nodes`},
		{"ReleaseLeaderInvalidUTF8", "", func(ctx context.Context, _ *testing.T, s *pgstore.Store, _ *pgxpool.Pool) error {
			_, err := s.ReleaseLeader(ctx, "l", "a\xffb")
			return err
		}, "22021", `SELECT count(*) FROM ax.leader`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database of its own
			pool := pgtest.Pool(t)
			ctx := ctxT(t)
			s, err := pgstore.New(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := pool.Exec(ctx, c.constraint); err != nil {
				t.Fatal(err)
			}
			err = c.call(ctx, t, s, pool)
			var pe *pgconn.PgError
			if !errors.Is(err, store.ErrInvalidParams) || !errors.As(err, &pe) || pe.Code != c.code {
				t.Fatalf("got %v, want an error wrapping ErrInvalidParams and a PgError %s", err, c.code)
			}
			var n int
			if err := pool.QueryRow(ctx, c.untouched).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("a refused call wrote %d rows", n)
			}
		})
	}
}
