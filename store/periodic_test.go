package store_test

import (
	"testing"
	"time"

	"github.com/axsched/ax/store"
)

// TestDeclarationTick: a declaration's LastTick is never on a whole
// second, where ticks are, and is the declaration's time otherwise; Ticked
// tells the two apart.
func TestDeclarationTick(t *testing.T) {
	sec := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		now  time.Time
		want time.Time
	}{
		{"WholeSecond", sec, sec.Add(time.Microsecond)},
		{"Fraction", sec.Add(250 * time.Millisecond), sec.Add(250 * time.Millisecond)},
		{"Microsecond", sec.Add(time.Microsecond), sec.Add(time.Microsecond)},
		{"OtherZone", sec.In(time.FixedZone("X", 3600)), sec.Add(time.Microsecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := store.DeclarationTick(tc.now)
			if !got.Equal(tc.want) {
				t.Fatalf("DeclarationTick(%s) = %s, want %s", tc.now, got, tc.want)
			}
			if store.Ticked(got) {
				t.Fatalf("Ticked(%s) = true for a declaration", got)
			}
		})
	}
	ticks := []struct {
		last time.Time
		want bool
	}{
		{sec, true},
		{sec.Add(time.Hour), true},
		{sec.Add(time.Microsecond), false},
		{time.Time{}, false},
	}
	for _, tc := range ticks {
		if got := store.Ticked(tc.last); got != tc.want {
			t.Errorf("Ticked(%s) = %v, want %v", tc.last, got, tc.want)
		}
	}
}
