package ax_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// PaymentArgs charges an order. Its jobs get five attempts, high priority
// and a unique key from the order, which makes charging twice impossible
// while a charge is pending or after one succeeded.
type PaymentArgs struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (PaymentArgs) Kind() string { return "order.pay" }

func (a PaymentArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.MaxAttempts(5), ax.Priority(ax.High),
		ax.UniqueKey("pay:" + a.Order), ax.UniqueWhileFinished()}
}

// ShipmentArgs ships a paid order.
type ShipmentArgs struct {
	Order string `json:"order"`
}

func (ShipmentArgs) Kind() string { return "order.ship" }

// ExampleJobArgsWithOptions schedules payments with the options their
// type states; an option given at the call wins over the type's.
func ExampleJobArgsWithOptions() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	first, err := ax.Enqueue(ctx, s, PaymentArgs{Order: "A-1", Cents: 1299})
	if err != nil {
		panic(err)
	}
	again, err := ax.Enqueue(ctx, s, PaymentArgs{Order: "A-1", Cents: 1299})
	if err != nil {
		panic(err)
	}
	fmt.Println("second payment of A-1 is a duplicate:", again.Duplicate && again.ID == first.ID)

	other, err := ax.Enqueue(ctx, s, PaymentArgs{Order: "B-2", Cents: 500}, ax.MaxAttempts(2))
	if err != nil {
		panic(err)
	}
	for _, id := range []ax.ScheduleResult{first, other} {
		rec, err := s.Get(ctx, id.ID)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d attempts, %s priority\n", rec.UniqueKey, rec.MaxAttempts, ax.PriorityLevel(rec.Priority))
	}
	// Output:
	// second payment of A-1 is a duplicate: true
	// pay:A-1: 5 attempts, high priority
	// pay:B-2: 2 attempts, high priority
}

// ExampleThenArgs ships an order once its payment succeeded: the
// shipment is inserted with the payment's success, atomically, or not at
// all.
func ExampleThenArgs() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a PaymentArgs) error {
		fmt.Printf("charged %d cents for %s\n", a.Cents, a.Order)
		return ax.ThenArgs(ctx, ShipmentArgs{Order: a.Order})
	})
	if err != nil {
		panic(err)
	}
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a ShipmentArgs) error {
		fmt.Printf("shipping %s, follow-up of the payment: %t\n", a.Order, j.Parent != uuid.Nil)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	if _, err := ax.Enqueue(ctx, s, PaymentArgs{Order: "A-1", Cents: 1299}); err != nil {
		panic(err)
	}
	<-done
	// Output:
	// charged 1299 cents for A-1
	// shipping A-1, follow-up of the payment: true
}

// RefundArgs refunds an order whose shipment failed for good.
type RefundArgs struct {
	Order string `json:"order"`
}

func (RefundArgs) Kind() string { return "order.refund" }

// ExampleFollowUpArgs refunds an order when its shipment dies, whatever
// makes it die: its handler's last failure, a rescue after its attempts
// ran out, or an operator's cancel.
func ExampleFollowUpArgs() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.HandleArgs(s, func(context.Context, *ax.Job, ShipmentArgs) error {
		return ax.Permanent(errors.New("address does not exist"))
	})
	if err != nil {
		panic(err)
	}
	err = ax.HandleArgs(s, func(_ context.Context, _ *ax.Job, a RefundArgs) error {
		fmt.Println("refunding", a.Order)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	_, err = ax.Enqueue(ctx, s, ShipmentArgs{Order: "A-1"},
		ax.FollowUpArgs([]ax.State{ax.StateDead, ax.StateCancelled}, RefundArgs{Order: "A-1"}))
	if err != nil {
		panic(err)
	}
	<-done
	// Output: refunding A-1
}

// ThumbnailArgs makes one thumbnail; AlbumReadyArgs tells that an
// album's thumbnails are all made.
type ThumbnailArgs struct {
	Photo int `json:"photo"`
}

func (ThumbnailArgs) Kind() string { return "thumbnail.make" }

type AlbumReadyArgs struct {
	Album string `json:"album"`
}

func (AlbumReadyArgs) Kind() string { return "album.ready" }

// ExampleNewRequest fans an album out to one typed job per photo, in one
// batch whose typed completion job runs once they have all ended.
func ExampleNewRequest() {
	ctx := context.Background()
	s, err := ax.New(ax.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.HandleArgs(s, func(context.Context, *ax.Job, ThumbnailArgs) error { return nil })
	if err != nil {
		panic(err)
	}
	err = ax.HandleArgs(s, func(ctx context.Context, j *ax.Job, a AlbumReadyArgs) error {
		children, err := s.BatchChildren(ctx, j.Batch, uuid.Nil, 10)
		if err != nil {
			return err
		}
		fmt.Printf("album %s: %d thumbnails\n", a.Album, len(children))
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	b := ax.Batch{Completion: ax.NewRequest(AlbumReadyArgs{Album: "holidays"})}
	for photo := range 3 {
		b.Children = append(b.Children, ax.NewRequest(ThumbnailArgs{Photo: photo}))
	}
	if _, err := s.ScheduleBatch(ctx, b); err != nil {
		panic(err)
	}
	<-done
	// Output: album holidays: 3 thumbnails
}

// DigestArgs builds a team's digest.
type DigestArgs struct {
	Team string `json:"team"`
}

func (DigestArgs) Kind() string { return "digest.build" }

func (DigestArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.Priority(ax.Low)}
}

// ExampleEveryArgs declares a daily typed schedule: its jobs are of
// DigestArgs' kind, with its value as payload and its options. The
// store's clock starts just before the tick, so the example need not wait
// for a real morning.
func ExampleEveryArgs() {
	ctx := context.Background()
	started := time.Now()
	morning := time.Date(2026, 3, 2, 6, 59, 59, 0, time.UTC)
	st := memstore.New(memstore.WithClock(func() time.Time { return morning.Add(time.Since(started)) }))
	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.HandleArgs(s, func(_ context.Context, j *ax.Job, a DigestArgs) error {
		fmt.Printf("%s for %s at %s, %s priority, schedule %s\n",
			j.Kind, a.Team, j.Tick.Format("15:04 MST"), j.Priority, j.Schedule)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := ax.EveryArgs(s, "ops-digest", "0 7 * * *", DigestArgs{Team: "ops"}); err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	<-done
	// Output: digest.build for ops at 07:00 UTC, low priority, schedule ops-digest
}
