package store

import (
	"context"
	"fmt"
	"time"
)

// ActivityReader is implemented by stores that summarize the jobs that
// finished in a recent window, per kind and time bucket, from what they
// keep (pgstore reads its history, which holds every finished job with
// its times): every process on the store reads the same figures, one
// that runs no jobs included. Dashboards draw their charts from it.
// Optional; pgstore and memstore implement it.
type ActivityReader interface {
	// Activity summarizes the jobs that finished in [since, until), in
	// buckets of width step from since (bucket i covers since+i*step to
	// since+(i+1)*step), per kind; buckets without a finished job are
	// left out. The window may hold at most MaxActivityBuckets buckets.
	// Its cost grows with the jobs finished in the window, not with the
	// history. Invalid bounds fail with an error wrapping
	// ErrInvalidParams.
	Activity(ctx context.Context, since, until time.Time, step time.Duration) ([]ActivityBucket, error)
}

// MaxActivityBuckets bounds the buckets of one Activity call.
const MaxActivityBuckets = 1440

// ActivityBucket is what one kind's jobs did in one bucket.
type ActivityBucket struct {
	// Kind is the jobs' kind.
	Kind string `json:"kind"`
	// Index is the bucket's position in the window: it starts at
	// since + Index*step.
	Index int `json:"index"`
	// Succeeded counts the jobs that succeeded in the bucket.
	Succeeded int64 `json:"succeeded"`
	// Dead counts the jobs that died in the bucket.
	Dead int64 `json:"dead"`
	// Cancelled counts the jobs cancelled in the bucket.
	Cancelled int64 `json:"cancelled"`
	// Started counts the finished jobs with a start time (cancelled
	// jobs that never ran have none).
	Started int64 `json:"started"`
	// LagSum is the sum of their last attempts' start lags (started
	// minus due, at least zero).
	LagSum time.Duration `json:"lag_sum"`
	// LagMax is the largest of them.
	LagMax time.Duration `json:"lag_max"`
}

// CheckActivity reports, wrapping ErrInvalidParams, what is wrong with an
// Activity window: since not before until, a step under a second, more
// than MaxActivityBuckets buckets, times outside MinTime..MaxTime.
func CheckActivity(since, until time.Time, step time.Duration) error {
	switch {
	case step < time.Second:
		return fmt.Errorf("%w: activity step %s under a second", ErrInvalidParams, step)
	case !since.Before(until):
		return fmt.Errorf("%w: activity window %s to %s is empty", ErrInvalidParams, since, until)
	case since.Before(MinTime) || until.After(MaxTime):
		return fmt.Errorf("%w: activity window outside %s to %s", ErrInvalidParams, MinTime, MaxTime)
	case until.Sub(since)/step > MaxActivityBuckets:
		return fmt.Errorf("%w: activity window of more than %d buckets", ErrInvalidParams, MaxActivityBuckets)
	}
	return nil
}
