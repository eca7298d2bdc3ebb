package main

import (
	"runtime/metrics"
	"slices"
	"testing"
	"time"
)

func TestPairCalls(t *testing.T) {
	begin := time.Now()
	ms := time.Millisecond
	// Schedule calls at 0, 10 and 20 ms, of 3, 4 and 5 ms.
	called := []time.Time{begin, begin.Add(10 * ms), begin.Add(20 * ms)}
	calls := durations{3 * ms, 4 * ms, 5 * ms}
	cases := []struct {
		name   string
		direct []storeCall
		want   durations // nil: not paired
	}{
		{"every call", []storeCall{{at: ms, took: ms}, {at: 11 * ms, took: 2 * ms}, {at: 21 * ms, took: 4 * ms}},
			durations{2 * ms, 2 * ms, ms}},
		{"calls without a direct start skipped", []storeCall{{at: 21 * ms, took: 3 * ms}}, durations{2 * ms}},
		{"a direct start outside every call", []storeCall{{at: 15 * ms, took: ms}}, nil},
		{"after the last call", []storeCall{{at: 30 * ms, took: ms}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := pairCalls(c.direct, begin, called, calls)
			if ok != (c.want != nil) || !slices.Equal(got, c.want) {
				t.Errorf("got %v (paired %t), want %v", got, ok, c.want)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	ms := time.Millisecond
	others := []storeCall{{at: 0, took: 100 * ms}, {at: 2000 * ms, took: ms}, {at: 3000 * ms, took: 10 * ms}}
	cases := []struct {
		name string
		c    storeCall
		want bool
	}{
		{"inside a long call that began earlier", storeCall{at: 50 * ms, took: ms}, true},
		{"between calls", storeCall{at: 500 * ms, took: ms}, false},
		{"begins as another ends", storeCall{at: 2001 * ms, took: ms}, false},
		{"ends as another begins", storeCall{at: 2999 * ms, took: ms}, false},
		{"straddles a call's start", storeCall{at: 2999 * ms, took: 2 * ms}, true},
		{"before every call", storeCall{at: -10 * ms, took: 5 * ms}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := overlaps(c.c, others); got != c.want {
				t.Errorf("got %t, want %t", got, c.want)
			}
		})
	}
}

func TestHistPct(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, 0.008}
	h0 := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 5, 5, 5}}
	cases := []struct {
		name   string
		counts []uint64
		p      float64
		want   time.Duration
	}{
		{"only the counts since h0", []uint64{95, 5, 5, 5}, 50, time.Millisecond},
		{"p99 in the last bucket", []uint64{103, 5, 5, 7}, 99, 8 * time.Millisecond},
		{"p99 below the last bucket", []uint64{104, 5, 5, 6}, 99, time.Millisecond},
		{"nothing since h0", []uint64{5, 5, 5, 5}, 99, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &metrics.Float64Histogram{Buckets: buckets, Counts: c.counts}
			if got := histPct(h, h0, c.p); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}
