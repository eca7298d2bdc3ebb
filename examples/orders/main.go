// Command orders is a small order service on AX, with typed jobs only: no
// kind is ever spelt as a string outside its type.
//
//   - Placing orders writes their rows and schedules their payments in one
//     transaction (EnqueueManyTx): an order exists with its payment job or
//     not at all.
//   - The payment handler calls the gateway, which takes at most two calls
//     at a time across every instance (GlobalConcurrency), then writes the
//     payment, adds the shipment (ThenArgs) and marks its job succeeded
//     (CompleteTxOf) in one transaction: the payment, the shipment job and
//     the success commit together, exactly once. Every fourth order's
//     first attempt fails after CompleteTx without committing, as a crash
//     would: it all rolls back and the retry does it again, once.
//   - PaymentArgs states its own options (five attempts, a unique key per
//     order), so no call site repeats them.
//
// The jobs and the service's tables share one database: an SQLite file by
// default, PostgreSQL when DATABASE_URL is set.
//
//	go run ./examples/orders                     # SQLite file ./ax-orders.db
//	go run ./examples/orders -db /tmp/o.db -n 50
//	DATABASE_URL=postgres://... go run ./examples/orders
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
)

// PaymentArgs charges an order.
type PaymentArgs struct {
	Order int64 `json:"order"`
	Cents int   `json:"cents"`
}

func (PaymentArgs) Kind() string { return "order.pay" }

// ScheduleOptions: a payment gets five attempts, and an order is never
// charged twice, even after its payment succeeded.
func (a PaymentArgs) ScheduleOptions() []ax.ScheduleOption {
	key := "pay:" + strconv.FormatInt(a.Order, 10)
	return []ax.ScheduleOption{ax.MaxAttempts(5), ax.UniqueKey(key), ax.UniqueWhileFinished()}
}

// ShipmentArgs ships a paid order.
type ShipmentArgs struct {
	Order int64 `json:"order"`
}

func (ShipmentArgs) Kind() string { return "order.ship" }

// gatewayLimit is how many payments the gateway takes at a time, all
// instances together.
const gatewayLimit = 2

func main() {
	db := flag.String("db", "ax-orders.db", "SQLite file of the jobs and orders (unless DATABASE_URL is set)")
	n := flag.Int("n", 20, "orders to place")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *n, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// run places n orders and waits until each is paid and shipped.
func run(ctx context.Context, dbPath string, n int, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if os.Getenv("DATABASE_URL") != "" {
		db, err := openPostgres(ctx, os.Getenv("DATABASE_URL"))
		if err != nil {
			return err
		}
		defer db.close()
		return serve(ctx, db, n, out)
	}
	db, err := openSQLite(ctx, dbPath)
	if err != nil {
		return err
	}
	defer db.close()
	return serve(ctx, db, n, out)
}

// serve runs the service on db, whose transactions are Tx's.
func serve[Tx any](ctx context.Context, db *database[Tx], n int, out io.Writer) error {
	s, err := ax.New(ax.Config{Store: db.store, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	var inGateway, peak atomic.Int32
	shipped := make(chan int64, n)
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a PaymentArgs) error {
		if err := callGateway(ctx, &inGateway, &peak); err != nil {
			return err
		}
		return db.inTx(ctx, func(tx Tx) error {
			if err := db.pay(ctx, tx, a.Order, j.Attempt); err != nil {
				return err
			}
			if err := ax.ThenArgs(ctx, ShipmentArgs{Order: a.Order}); err != nil {
				return err
			}
			if err := ax.CompleteTxOf(ctx, s, tx); err != nil {
				return err // ErrLeaseLost: another instance has the job; roll back
			}
			if a.Order%4 == 0 && j.Attempt == 1 {
				return errors.New("crashed before the commit") // rolls it all back
			}
			return nil // commits
		})
	}, ax.GlobalConcurrency(gatewayLimit), ax.Retry(ax.ExponentialBackoff{Base: 50 * time.Millisecond, Max: time.Second}))
	if err != nil {
		return err
	}
	err = ax.HandleArgs(s, func(ctx context.Context, _ *ax.Job, a ShipmentArgs) error {
		if err := db.ship(ctx, a.Order); err != nil {
			return err
		}
		shipped <- a.Order
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	}()

	var orders []int64
	err = db.inTx(ctx, func(tx Tx) error {
		payments := make([]PaymentArgs, n)
		for i := range payments {
			cents := 1000 + 100*i
			id, err := db.placeOrder(ctx, tx, cents)
			if err != nil {
				return err
			}
			orders, payments[i] = append(orders, id), PaymentArgs{Order: id, Cents: cents}
		}
		_, err := ax.EnqueueManyTx(ctx, s, tx, payments)
		return err
	})
	if err != nil {
		return fmt.Errorf("place orders: %w", err)
	}
	fmt.Fprintf(out, "placed %d orders on %s\n", n, db.where)
	for range orders {
		select {
		case <-shipped:
		case <-ctx.Done():
			return fmt.Errorf("orders not all shipped: %w", context.Cause(ctx))
		}
	}
	payments, retried, shipments, err := db.count(ctx, orders)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d payments (%d by a retry after a rollback), %d shipments for %d orders; at most %d payments at a time (limit %d)\n",
		payments, retried, shipments, len(orders), peak.Load(), gatewayLimit)
	if payments != len(orders) || shipments != len(orders) || peak.Load() > gatewayLimit {
		return errors.New("an order was lost or doubled, or the gateway's limit was broken")
	}
	fmt.Fprintln(out, "every order paid once and shipped once")
	return nil
}

// callGateway stands for the payment gateway's call, counting the calls
// in flight on this instance.
func callGateway(ctx context.Context, inGateway, peak *atomic.Int32) error {
	now := inGateway.Add(1)
	defer inGateway.Add(-1)
	for {
		p := peak.Load()
		if now <= p || peak.CompareAndSwap(p, now) {
			break
		}
	}
	select {
	case <-time.After(5 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
