package ax_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

type ReportArgs struct {
	Team string `json:"team"`
}

// ExampleScheduler_Every declares a weekday report at 06:00 New York time.
// Every host of a service declares the same schedule; each tick yields one
// job however many hosts run. The store's clock starts just before 06:00,
// so the example need not wait for a real morning.
func ExampleScheduler_Every() {
	ctx := context.Background()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	started := time.Now()
	morning := time.Date(2026, 3, 2, 5, 59, 59, 0, ny) // a Monday
	st := memstore.New(memstore.WithClock(func() time.Time { return morning.Add(time.Since(started)) }))

	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = ax.Handle(s, "report.build", func(ctx context.Context, j *ax.Job, p ReportArgs) error {
		fmt.Printf("report for %s, tick %s, key %s\n", p.Team, j.RunAt.In(ny).Format("Mon 15:04 MST"), j.UniqueKey)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	err = s.Every("weekday-report", "0 6 * * MON-FRI", ReportArgs{Team: "ops"},
		ax.Location(ny), ax.JobKind("report.build"), ax.Misfire(ax.MisfireSkip))
	if err != nil {
		panic(err)
	}

	// Bad specs are refused at once.
	err = s.Every("broken", "CRON_TZ=Mars/Olympus 0 6 * * *", nil)
	fmt.Println(errors.Is(err, ax.ErrInvalidSchedule))

	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	if err := s.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// true
	// report for ops, tick Mon 06:00 EST, key periodic:weekday-report:2026-03-02T11:00:00Z
}
