package pgstore_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

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
