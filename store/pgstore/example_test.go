package pgstore_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// A Store whose direct starts (Schedule of a job due now, on a host with
// a free worker) start the job while the insert is flushed to disk, not
// after: the handler starts about one round trip after the call, and
// Schedule still returns only once the job is durable. A PostgreSQL crash
// during that flush can lose a job that already started.
func ExampleWithEarlyDirectStart() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	st, err := pgstore.New(ctx, pool, pgstore.WithEarlyDirectStart())
	if err != nil {
		log.Fatal(err) // also when the role may not run pg_logical_emit_message
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Handle("email.send", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })); err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()
	if _, err := s.Schedule(ctx, "email.send", nil); err != nil {
		log.Fatal(err) // the job may have started; it is durable only on nil
	}
}

// A Store whose claims and outcomes commit without waiting for the WAL
// flush: more jobs per second where the disk's flush is slow, at the cost
// of jobs running again after a PostgreSQL crash or failover. Schedule's
// inserts stay durable.
func ExampleWithAsyncClaimsAndOutcomes() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	st, err := pgstore.New(ctx, pool, pgstore.WithAsyncClaimsAndOutcomes())
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()
}
