package pgstore

import (
	"testing"
	"time"
)

// TestAgedMixedKinds: a kind whose claim of one kind found its ranges
// mixed makes the open claim for the hold, then tries again; other kinds,
// and claims of several kinds, are not affected.
func TestAgedMixedKinds(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	type step struct {
		saw   string // a claim of this kind found its ranges mixed at t0
		kinds []string
		at    time.Duration // after t0
		want  bool
	}
	cases := []struct {
		name  string
		hold  time.Duration
		steps []step
	}{
		{"nothing seen", 0, []step{{kinds: []string{"a"}, want: true}}},
		{"several kinds", 0, []step{{kinds: []string{"a", "b"}, want: false}}},
		{"no kinds", 0, []step{{want: false}}},
		{"within the hold", 0, []step{{saw: "a", kinds: []string{"a"}, at: agedMixedHold - time.Millisecond, want: false}}},
		{"another kind", 0, []step{{saw: "a", kinds: []string{"b"}, want: true}}},
		{"after the hold, then tried again", 0, []step{
			{saw: "a", kinds: []string{"a"}, at: agedMixedHold, want: true},
			{kinds: []string{"a"}, want: true},
		}},
		{"a hold of its own", time.Minute, []step{
			{saw: "a", kinds: []string{"a"}, at: 59 * time.Second, want: false},
			{kinds: []string{"a"}, at: time.Minute, want: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := agedMixedKinds{hold: c.hold}
			for i, s := range c.steps {
				if s.saw != "" {
					m.saw(s.saw, t0)
				}
				if got := m.tryOneKind(s.kinds, t0.Add(s.at)); got != s.want {
					t.Fatalf("step %d: tryOneKind(%v) at t0+%v = %v, want %v", i, s.kinds, s.at, got, s.want)
				}
			}
		})
	}
}
