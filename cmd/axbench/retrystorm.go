package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
)

// errDown is the failing downstream's error.
var errDown = errors.New("downstream unavailable")

// runRetryStorm makes -storm-jobs jobs fail at once against a downstream
// that is down for -storm-down from the first attempt, once with the
// default policy (ExponentialBackoff{}: full jitter) and once with
// ExponentialBackoff{NoJitter: true}, and counts retries per 100 ms window.
func runRetryStorm(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	r := newResult(map[string]any{"jobs": o.stormJobs, "down": o.stormDown.String(), "window": "100ms", "conns": connsParam(o.conns)})
	t := table{Title: "retries per 100 ms window", Columns: []string{"policy", "attempts", "retries", "peak", "mean", "peak/mean", "peak/mean while down", "all ok after recovery s"}}
	policies := []struct {
		name   string
		policy ax.RetryPolicy
	}{
		{"jittered (default)", ax.ExponentialBackoff{}},
		{"no jitter", ax.ExponentialBackoff{NoJitter: true}},
		// The trade-off: a larger first step spreads the first wave
		// thinner at the cost of a slower first retry.
		{"jittered, Base 5s", ax.ExponentialBackoff{Base: 5 * time.Second}},
	}
	for _, p := range policies {
		st, err := stormOnce(ctx, b, p.policy)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		t.Rows = append(t.Rows, []string{p.name, fmt.Sprint(st.attempts), fmt.Sprint(st.retries), fmt.Sprint(st.peak),
			fmt.Sprintf("%.1f", st.mean), fmt.Sprintf("%.2f", st.peak/st.mean), fmt.Sprintf("%.2f", st.peakDown/st.meanDown),
			fmt.Sprintf("%.2f", st.recovered.Seconds())})
		switch p.name {
		case policies[0].name:
			r.atMost("peak/mean retries per 100 ms, jittered", st.peak/st.mean, "×", 2)
			r.add("peak/mean while down, jittered", st.peakDown/st.meanDown, "×")
			r.add("all succeeded after recovery, jittered", st.recovered.Seconds(), "s")
		case policies[1].name:
			r.add("peak/mean retries per 100 ms, no jitter", st.peak/st.mean, "×")
			r.add("peak/mean while down, no jitter", st.peakDown/st.meanDown, "×")
			r.add("all succeeded after recovery, no jitter", st.recovered.Seconds(), "s")
		default:
			r.add("peak/mean while down, jittered Base 5s", st.peakDown/st.meanDown, "×")
			r.add("all succeeded after recovery, jittered Base 5s", st.recovered.Seconds(), "s")
		}
	}
	r.Tables = append(r.Tables, t)
	r.note("windows of 100 ms from the first failure; mean over the windows from the first retry to the last; 'while down' only up to the recovery")
	r.note("retries are attempts after the first; default Base 1s, Max 1h, MaxAttempts 20")
	return r, nil
}

type stormStats struct {
	attempts, retries  int
	peak, mean         float64
	peakDown, meanDown float64
	recovered          time.Duration
}

func stormOnce(ctx context.Context, b *bench, policy ax.RetryPolicy) (stormStats, error) {
	o := b.opt
	d, err := b.createDB(ctx)
	if err != nil {
		return stormStats{}, err
	}
	defer d.close()
	s, err := d.scheduler(0)
	if err != nil {
		return stormStats{}, err
	}
	type attempt struct {
		at  time.Duration
		num int
	}
	var (
		mu       sync.Mutex
		attempts []attempt
		t0       atomic.Int64 // first attempt, unix ns
		lastOK   atomic.Int64
	)
	c := newCounter(o.stormJobs)
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		t0.CompareAndSwap(0, now.UnixNano())
		at := now.Sub(time.Unix(0, t0.Load()))
		mu.Lock()
		attempts = append(attempts, attempt{at, j.Attempt})
		mu.Unlock()
		if at < o.stormDown {
			return errDown
		}
		lastOK.Store(now.UnixNano())
		c.inc()
		return nil
	}), ax.Retry(policy))
	if err != nil {
		return stormStats{}, err
	}
	if err := s.Start(ctx); err != nil {
		return stormStats{}, err
	}
	if _, err := scheduleNoops(ctx, s, o.stormJobs, o.stormJobs); err != nil {
		_ = stopScheduler(s)
		return stormStats{}, err
	}
	waitErr := b.wait(ctx, "retrystorm: succeeded", c, o.stormDown+5*time.Minute)
	stopErr := stopScheduler(s)
	if waitErr != nil {
		return stormStats{}, waitErr
	}
	if stopErr != nil {
		return stormStats{}, stopErr
	}

	const window = 100 * time.Millisecond
	counts := map[int]int{}
	first, last := -1, -1
	st := stormStats{attempts: len(attempts)}
	for _, a := range attempts {
		if a.num < 2 {
			continue
		}
		st.retries++
		w := int(a.at / window)
		counts[w]++
		if first < 0 || w < first {
			first = w
		}
		last = max(last, w)
	}
	downEnd := int(o.stormDown / window)
	var downRetries, downWindows int
	for w := first; w <= last && first >= 0; w++ {
		st.peak = max(st.peak, float64(counts[w]))
		if w < downEnd {
			st.peakDown = max(st.peakDown, float64(counts[w]))
			downRetries += counts[w]
			downWindows++
		}
	}
	if first >= 0 {
		st.mean = float64(st.retries) / float64(last-first+1)
	}
	if downWindows > 0 {
		st.meanDown = float64(downRetries) / float64(downWindows)
	}
	st.recovered = time.Unix(0, lastOK.Load()).Sub(time.Unix(0, t0.Load()).Add(o.stormDown))
	return st, nil
}
