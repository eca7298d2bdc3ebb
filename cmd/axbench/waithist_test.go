package main

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitBucketBounds checks that every value lands in a bucket whose
// range holds it, and that the buckets are ordered and within 12.5 %.
func TestWaitBucketBounds(t *testing.T) {
	for _, us := range []int64{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 100, 999, 1000, 1023, 1024, 123456, 1 << 30, 1<<40 + 12345} {
		i := waitBucket(us)
		low, next := waitBucketLow(i), waitBucketLow(i+1)
		assert.LessOrEqual(t, low, us, "value %d, bucket %d", us, i)
		assert.Less(t, us, next, "value %d, bucket %d", us, i)
		if us >= 8 {
			assert.LessOrEqual(t, float64(next-low), 0.125*float64(low)+1, "value %d: bucket %d..%d too wide", us, low, next)
		}
	}
	for i := range waitBuckets - 1 {
		require.Less(t, waitBucketLow(i), waitBucketLow(i+1), "bucket %d", i)
		require.Equal(t, i, waitBucket(waitBucketLow(i)), "bucket %d's low", i)
	}
	assert.Equal(t, 0, waitBucket(-5), "a negative duration (clock step) counts as 0")
	assert.Equal(t, waitBuckets-1, waitBucket(1<<62), "a huge duration goes to the last bucket")
}

// TestWaitHistQuantiles checks the quantiles against known distributions:
// each is an upper bound within a bucket's width, and never above the
// largest value recorded.
func TestWaitHistQuantiles(t *testing.T) {
	cases := []struct {
		name   string
		values func(i int) time.Duration
		n      int
		want   map[float64]time.Duration // quantile → exact value
	}{
		{"uniform 1..1000 µs", func(i int) time.Duration { return time.Duration(i+1) * time.Microsecond }, 1000,
			map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond, 1: 1000 * time.Microsecond}},
		{"one value", func(int) time.Duration { return 3 * time.Millisecond }, 10,
			map[float64]time.Duration{0.5: 3 * time.Millisecond, 0.99: 3 * time.Millisecond, 1: 3 * time.Millisecond}},
		{"a slow tail of 1 %", func(i int) time.Duration {
			if i%100 == 0 {
				return time.Second
			}
			return 100 * time.Microsecond
		}, 10000, map[float64]time.Duration{0.5: 100 * time.Microsecond, 0.98: 100 * time.Microsecond, 1: time.Second}},
		{"small exact values", func(i int) time.Duration { return time.Duration(i%4) * time.Microsecond }, 400,
			map[float64]time.Duration{0.25: 0, 0.5: time.Microsecond, 1: 3 * time.Microsecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h waitHist
			var wg sync.WaitGroup
			for g := range 4 { // as workers do: concurrent records
				wg.Go(func() {
					for i := g; i < tc.n; i += 4 {
						h.record(tc.values(i))
					}
				})
			}
			wg.Wait()
			c := h.snapshot()
			require.EqualValues(t, tc.n, c.total())
			for q, exact := range tc.want {
				got := c.quantile(q)
				assert.GreaterOrEqual(t, got, exact, "q%.2f", q)
				assert.LessOrEqual(t, float64(got), 1.125*float64(exact)+float64(time.Microsecond), "q%.2f", q)
			}
		})
	}
}

// TestWaitCountsAdd checks that a run's figures come from every worker's
// counts, as they travel: through JSON, of different lengths.
func TestWaitCountsAdd(t *testing.T) {
	var fast, slow waitHist
	for range 99 {
		fast.record(50 * time.Microsecond)
	}
	slow.record(2 * time.Second)
	var all waitCounts
	for _, h := range []*waitHist{&fast, &slow} {
		b, err := json.Marshal(h.snapshot())
		require.NoError(t, err)
		var c waitCounts
		require.NoError(t, json.Unmarshal(b, &c))
		all.add(c)
	}
	assert.EqualValues(t, 100, all.total())
	assert.Equal(t, 2*time.Second, all.quantile(1))
	assert.Less(t, all.quantile(0.99), 60*time.Microsecond)
	assert.Zero(t, waitCounts{}.quantile(0.5), "no values: zero")
}
