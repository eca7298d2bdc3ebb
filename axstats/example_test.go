package axstats_test

import (
	"fmt"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axstats"
)

// ExampleObserver shows the percentiles an Observer computes.
func ExampleObserver() {
	so := axstats.New(axstats.Config{Window: time.Minute})
	now := time.Now()
	for i := 1; i <= 10; i++ {
		so.Observe(ax.Event{Kind: ax.EventStarted, JobKind: "mail", At: now, StartLag: time.Duration(i) * time.Millisecond})
	}
	lag := so.Snapshot()["mail"].StartLag
	fmt.Println(lag.Count, lag.P50, lag.P90, lag.P99, lag.Max)
	// Output: 10 5ms 9ms 10ms 10ms
}
