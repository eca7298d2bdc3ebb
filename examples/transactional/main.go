// Command transactional shows ScheduleTx: a job enqueued inside the same
// PostgreSQL transaction as the business write it belongs to. If the
// transaction rolls back, the job never existed; when it commits, running
// schedulers are woken by the commit's notification within milliseconds.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/transactional
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Receipt is the payload of the "receipt.send" kind.
type Receipt struct {
	OrderID int64 `json:"order_id"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "transactional:", err)
		os.Exit(1)
	}
}

func run() error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("set DATABASE_URL to a PostgreSQL server, e.g. postgres://postgres@127.0.0.1:5432/postgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pgstore.New(ctx, pool)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS demo_orders (id bigserial PRIMARY KEY, total_cents int NOT NULL)`); err != nil {
		return err
	}

	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		return err
	}
	sent := make(chan int64, 1)
	err = ax.Handle(s, "receipt.send", func(ctx context.Context, j *ax.Job, r Receipt) error {
		fmt.Printf("sending receipt for order %d (start lag %s)\n", r.OrderID, j.ClaimLag().Round(time.Microsecond))
		sent <- r.OrderID
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		// Stop waits for running handlers and the last outcomes; bound the
		// wait so a stuck handler cannot hold the process forever.
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(stopCtx); err != nil {
			fmt.Println("stop:", err)
		}
	}()

	// An order that fails validation: the transaction rolls back, and its
	// receipt job with it.
	if _, err := placeOrder(ctx, pool, s, -5); err != nil {
		fmt.Println("order rejected, transaction rolled back:", err)
	}
	// A good order: the row and its job commit together.
	orderID, err := placeOrder(ctx, pool, s, 4200)
	if err != nil {
		return err
	}
	fmt.Printf("order %d committed with its receipt job\n", orderID)
	select {
	case got := <-sent:
		if got != orderID {
			return fmt.Errorf("receipt for order %d, want %d", got, orderID)
		}
	case <-ctx.Done():
		return errors.New("receipt job never ran")
	}
	return nil
}

// placeOrder inserts an order and schedules its receipt in one transaction.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, s *ax.Scheduler, totalCents int) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO demo_orders (total_cents) VALUES ($1) RETURNING id`, totalCents).Scan(&id); err != nil {
			return err
		}
		if _, err := s.ScheduleTx(ctx, tx, "receipt.send", Receipt{OrderID: id}); err != nil {
			return err
		}
		if totalCents <= 0 {
			return fmt.Errorf("order %d: total must be positive", id)
		}
		return nil
	})
	return id, err
}
