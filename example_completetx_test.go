package ax_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// ExampleCompletesInTx registers a handler that ends its jobs with
// CompleteTxOf in a PostgreSQL transaction. On pgstore it registers; on
// memstore, which takes no transaction, Handle refuses it at once.
// Registered without the option, the same handler's job fails on its
// first attempt, for good: a retry would charge the card again and fail
// the same way.
func ExampleCompletesInTx() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	charges := 0
	charge := func(ctx context.Context, _ *ax.Job, _ struct{}) error {
		charges++     // the card is charged here, then the job ends in tx
		var tx pgx.Tx // on PostgreSQL: tx, err := pool.Begin(ctx)
		if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
			return fmt.Errorf("charge: %w", err)
		}
		return tx.Commit(ctx)
	}

	err = ax.Handle(s, "card.charge", charge, ax.CompletesInTx[pgx.Tx]())
	fmt.Println(err)
	fmt.Println(errors.Is(err, ax.ErrTxUnsupported))

	// Without the option: one attempt, one charge, and the job is dead.
	if err := ax.Handle(s, "card.charge", charge, ax.MaxAttempts(5)); err != nil {
		panic(err)
	}
	res, err := s.Schedule(ctx, "card.charge", nil)
	if err != nil {
		panic(err)
	}
	if _, err := s.RunDue(ctx); err != nil {
		panic(err)
	}
	job, err := s.Get(ctx, res.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s after %d attempt(s), %d charge(s)\n", job.State, job.Attempt, charges)
	// Output:
	// handle "card.charge": store *memstore.Store takes no pgx.Tx in CompleteTx: ax: store takes no transaction of this type
	// true
	// dead after 1 attempt(s), 1 charge(s)
}
