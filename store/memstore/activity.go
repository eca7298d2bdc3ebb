package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

var _ store.ActivityReader = (*Store)(nil)

// Activity summarizes the jobs that finished in [since, until) per kind
// and bucket of step; see store.ActivityReader. It walks every job held.
func (s *Store) Activity(ctx context.Context, since, until time.Time, step time.Duration) ([]store.ActivityBucket, error) {
	if err := store.CheckActivity(since, until, step); err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	defer s.mu.Unlock()
	type key struct {
		kind string
		i    int
	}
	byKey := map[key]*store.ActivityBucket{}
	var out []*store.ActivityBucket
	for _, j := range s.jobs {
		r := &j.rec
		if !r.State.Final() || r.FinishedAt.Before(since) || !r.FinishedAt.Before(until) {
			continue
		}
		k := key{r.Kind, int(r.FinishedAt.Sub(since) / step)}
		b := byKey[k]
		if b == nil {
			b = &store.ActivityBucket{Kind: k.kind, Index: k.i}
			byKey[k] = b
			out = append(out, b)
		}
		switch r.State {
		case store.StateSucceeded:
			b.Succeeded++
		case store.StateDead:
			b.Dead++
		default:
			b.Cancelled++
		}
		if !r.AttemptedAt.IsZero() {
			lag := max(r.AttemptedAt.Sub(r.RunAt), 0)
			b.Started++
			b.LagSum += lag
			b.LagMax = max(b.LagMax, lag)
		}
	}
	res := make([]store.ActivityBucket, len(out))
	for i, b := range out {
		res[i] = *b
	}
	return res, nil
}
