// Command completetx shows a handler whose database writes and the job's
// success commit together (CompleteTx), with a follow-up job that is added
// by the same commit (ThenArgs): the charge of an order is written once, and
// its shipment is scheduled once, even when an attempt dies between its
// write and its commit.
//
// Each "order.charge" job, in one transaction of the application's:
// inserts the charge row, adds an "order.ship" job with ax.ThenArgs, and marks
// itself succeeded with ax.CompleteTxOf; the handler is registered with
// ax.CompletesInTx, so a store that does not take its transaction type is
// refused at registration, not on a job. The first attempt of one order
// stops before its commit, as a process killed there would: the row, the
// success and the follow-up roll back together and the job is retried.
//
//	go run ./examples/completetx                              # SQLite (*sql.Tx), a temporary file
//	DATABASE_URL=postgres://... go run ./examples/completetx  # PostgreSQL (pgx.Tx)
//
// To enqueue a job in the caller's transaction instead (ScheduleTx,
// EnqueueTx), see examples/transactional; examples/orders is a whole order
// service built this way.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/examples/internal/demo"
)

// Charge is the payload of "order.charge".
type Charge struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

// Kind names the job kind of Charge.
func (Charge) Kind() string { return "order.charge" }

// Ship is the payload of "order.ship", scheduled by a charge's success.
type Ship struct {
	Order string `json:"order"`
}

// Kind names the job kind of Ship.
func (Ship) Kind() string { return "order.ship" }

// errCrash stands for a process that dies after its writes, before its commit.
var errCrash = errors.New("simulated crash before commit")

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "completetx:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := demo.Open(ctx, "completetx")
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "AX completetx on %s\n", db.Where)
	if err := exec(ctx, db, createTables); err != nil {
		return fmt.Errorf("create the example's tables: %w", err)
	}

	s, err := ax.New(ax.Config{Store: db.Store, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	run := uuid.NewString()[:8] // order IDs of this run (PostgreSQL keeps earlier runs' rows)
	crashOrder := run + "-2"
	// The handler's transaction type: HandleArgs refuses it (with
	// ax.ErrTxUnsupported) if the store's CompleteTx does not take it.
	inTx := ax.CompletesInTx[*sql.Tx]()
	if db.Pool != nil {
		inTx = ax.CompletesInTx[pgx.Tx]()
	}
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, c Charge) error {
		crash := c.Order == crashOrder && j.Attempt == 1
		if db.Pool != nil { // PostgreSQL: a pgx.Tx (s.CompleteTx takes it too)
			return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				return charge(ctx, s, tx, func(q string, args ...any) error {
					_, err := tx.Exec(ctx, q, args...)
					return err
				}, c, crash)
			})
		}
		// SQLite: a *sql.Tx begun on the store's writer, sqlitestore.Store.DB.
		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
		err = charge(ctx, s, tx, func(q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}, c, crash)
		if err != nil {
			return err
		}
		return tx.Commit() // an error here retries the job: never a success without its writes
	}, inTx, ax.Retry(ax.ExponentialBackoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}))
	if err != nil {
		return err
	}
	shipped := make(chan string, 10)
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, sh Ship) error {
		if err := exec(ctx, db, `INSERT INTO completetx_shipments (order_id, job_id) VALUES ($1, $2)`, sh.Order, j.ID.String()); err != nil {
			return err
		}
		shipped <- sh.Order
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}

	orders := []Charge{{run + "-1", 4200}, {crashOrder, 1999}, {run + "-3", 500}}
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		res, err := ax.Enqueue(ctx, s, o)
		if err != nil {
			return fmt.Errorf("enqueue the charge of %s: %w", o.Order, err)
		}
		ids[i] = res.ID
	}
	for range orders {
		select {
		case o := <-shipped:
			fmt.Fprintf(out, "order %s shipped by the job its charge added\n", o)
		case <-ctx.Done():
			return errors.New("the orders did not ship in time")
		}
	}
	for i, id := range ids { // the charge jobs ended with their commits
		rec, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "order %s: charge job %s on attempt %d", orders[i].Order, rec.State, rec.Attempt)
		for _, e := range rec.Errors {
			fmt.Fprintf(out, " (attempt %d: %s)", e.Attempt, e.Error)
		}
		fmt.Fprintln(out)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	if err := s.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}

	// Every order: one charge row, one shipment.
	for _, o := range orders {
		var charges, shipments int
		if err := count(ctx, db, &charges, `SELECT count(*) FROM completetx_charges WHERE order_id = $1`, o.Order); err != nil {
			return err
		}
		if err := count(ctx, db, &shipments, `SELECT count(*) FROM completetx_shipments WHERE order_id = $1`, o.Order); err != nil {
			return err
		}
		fmt.Fprintf(out, "order %s: %d charge(s), %d shipment(s)\n", o.Order, charges, shipments)
		if charges != 1 || shipments != 1 {
			return fmt.Errorf("order %s: %d charges and %d shipments, want one each", o.Order, charges, shipments)
		}
	}
	fmt.Fprintln(out, "every order charged once and shipped once")
	return nil
}

// charge does the work of a charge inside tx, whatever the store's
// transaction type Tx: the row, the follow-up, and the job's success.
// exec runs a statement in tx.
func charge[Tx any](ctx context.Context, s *ax.Scheduler, tx Tx, exec func(string, ...any) error, c Charge, crash bool) error {
	if err := exec(`INSERT INTO completetx_charges (order_id, cents) VALUES ($1, $2)`, c.Order, c.Cents); err != nil {
		return fmt.Errorf("write the charge: %w", err)
	}
	// Inserted only with the success below, in the same commit.
	if err := ax.ThenArgs(ctx, Ship{Order: c.Order}); err != nil {
		return err
	}
	// Fenced by the attempt's lease: ErrLeaseLost if another host owns
	// the job now; the caller then rolls tx back.
	if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
		return err
	}
	if crash {
		return fmt.Errorf("order %s: %w (charge, success and follow-up roll back)", c.Order, errCrash)
	}
	return nil
}

// createTables makes the application's tables, in the store's database.
const createTables = `CREATE TABLE IF NOT EXISTS completetx_charges (order_id TEXT PRIMARY KEY, cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS completetx_shipments (order_id TEXT NOT NULL, job_id TEXT NOT NULL)`

// exec runs a statement outside any transaction.
func exec(ctx context.Context, db *demo.Store, q string, args ...any) error {
	if db.Pool != nil {
		_, err := db.Pool.Exec(ctx, q, args...)
		return err
	}
	_, err := db.SQL.ExecContext(ctx, q, args...)
	return err
}

// count scans one integer.
func count(ctx context.Context, db *demo.Store, n *int, q string, args ...any) error {
	if db.Pool != nil {
		return db.Pool.QueryRow(ctx, q, args...).Scan(n)
	}
	return db.SQL.QueryRowContext(ctx, q, args...).Scan(n)
}
