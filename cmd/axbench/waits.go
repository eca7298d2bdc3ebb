package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitSampleEvery is how often sampleWaits reads pg_stat_activity.
const waitSampleEvery = 50 * time.Millisecond

// waitSample is what the benchmark database's active backends were doing
// at one instant: a count per activity, named "CPU" (active, not
// waiting) or "type:event" (pg_stat_activity's wait_event_type and
// wait_event), prefixed with the backend type for backends other than
// client connections ("autovacuum worker/IO:DataFileRead").
type waitSample struct {
	at     time.Duration
	counts map[string]int
}

// sampleWaits samples the active backends of the database every
// waitSampleEvery on its own connection (so that it waits for none of the
// scheduler's) until ctx ends, and returns the samples, timed from begin.
// A heldxmin stall shows in them as what the backends wait on. label, if
// not empty, is an SQL expression on pg_stat_activity whose value
// prefixes each activity of a client backend (such as the statement it
// runs: "insert-claimed/IO:WALSync").
func sampleWaits(ctx context.Context, dsn string, begin time.Time, label string) ([]waitSample, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var out []waitSample
	tick := time.NewTicker(waitSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, nil
		case <-tick.C:
		}
		prefix := "''"
		if label != "" {
			prefix = "(" + label + ") || '/'"
		}
		rows, _ := conn.Query(ctx, `SELECT CASE WHEN backend_type = 'client backend' THEN `+prefix+` ELSE backend_type || '/' END
				|| coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
			FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle'
				AND state IS DISTINCT FROM 'idle in transaction'
			GROUP BY 1`)
		s := waitSample{at: time.Since(begin), counts: map[string]int{}}
		var (
			name string
			n    int
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
			s.counts[name] = n
			return nil
		})
		if ctx.Err() != nil {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("sample waits: %w", err)
		}
		out = append(out, s)
	}
}

// waitsBetween sums the samples taken in [from, to) and returns the
// number of samples and the summed counts.
func waitsBetween(samples []waitSample, from, to time.Duration) (int, map[string]int) {
	sum := map[string]int{}
	n := 0
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		n++
		for k, v := range s.counts {
			sum[k] += v
		}
	}
	return n, sum
}

// topWaits formats the k largest activities of sum, averaged over n
// samples (mean number of backends doing each), largest first:
// "IO:WALSync 2.1, CPU 1.4".
func topWaits(n int, sum map[string]int, k int) string {
	if n == 0 || len(sum) == 0 {
		return "-"
	}
	names := slices.SortedFunc(maps.Keys(sum), func(a, b string) int {
		return cmp.Or(cmp.Compare(sum[b], sum[a]), cmp.Compare(a, b))
	})
	parts := make([]string, 0, k)
	for _, name := range names[:min(k, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", name, float64(sum[name])/float64(n)))
	}
	return strings.Join(parts, ", ")
}
