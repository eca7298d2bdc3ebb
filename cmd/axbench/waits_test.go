package main

import (
	"testing"
	"time"
)

func TestTopWaits(t *testing.T) {
	samples := []waitSample{
		{at: 0, counts: map[string]int{"CPU": 2, "Lock:transactionid": 1}},
		{at: 50 * time.Millisecond, counts: map[string]int{"CPU": 1, "IO:WALSync": 3}},
		{at: 100 * time.Millisecond, counts: map[string]int{"autovacuum worker/CPU": 1}},
		{at: time.Second, counts: map[string]int{"CPU": 9}}, // outside the range
	}
	cases := []struct {
		name     string
		from, to time.Duration
		k        int
		want     string
	}{
		{"largest first, ties by name", 0, time.Second, 2, "CPU 1.0, IO:WALSync 1.0"},
		{"all", 0, time.Second, 8, "CPU 1.0, IO:WALSync 1.0, Lock:transactionid 0.3, autovacuum worker/CPU 0.3"},
		{"one sample", 50 * time.Millisecond, 100 * time.Millisecond, 8, "IO:WALSync 3.0, CPU 1.0"},
		{"no sample", 2 * time.Second, 3 * time.Second, 3, "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, sum := waitsBetween(samples, c.from, c.to)
			if got := topWaits(n, sum, c.k); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
