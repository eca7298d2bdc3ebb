package main

import (
	"testing"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axtest"
)

// TestCountWordsWithAxtest tests the example's own code (register,
// countWords) the way an application tests its handlers with axtest: on a
// Scheduler that runs nothing in the background, with a clock that moves
// only when the test says, jobs run inline by axtest.Work, and
// assertions on what was scheduled. No database, no sleeps.
func TestCountWordsWithAxtest(t *testing.T) {
	s, clock := axtest.NewScheduler(t, ax.Config{})
	totals := make(chan Total, 1)
	if err := register(s, totals); err != nil {
		t.Fatal(err)
	}

	// The children wait an hour; the completion is not scheduled yet.
	if _, err := countWords(t.Context(), s, []string{"one two three", "", "four"}, ax.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	axtest.RequireManyScheduled(t, s,
		axtest.ExpectArgs[Line](axtest.Payload(Line{N: 1, Text: "one two three"}), axtest.RunAt(axtest.Epoch.Add(time.Hour))),
		axtest.ExpectArgs[Line](axtest.Payload(Line{N: 2, Text: ""})),
		axtest.ExpectArgs[Line](axtest.Payload(Line{N: 3, Text: "four"})),
	)
	axtest.RequireNotScheduledKind(t, s, "words.total") // a kind without a JobArgs type
	if n := axtest.Work(t, s); n != 0 {
		t.Fatalf("%d jobs ran before they were due", n)
	}

	// An hour later the children run, here and now, and the completion
	// that the last one's end scheduled runs in the same Work.
	clock.Advance(time.Hour)
	if n := axtest.Work(t, s); n != 4 {
		t.Fatalf("%d attempts ran, want 4 (3 children, one completion)", n)
	}
	dead := axtest.RequireScheduled[Line](t, s, axtest.State(ax.StateDead)) // typed: dead.Args is a Line
	if dead.Args.N != 2 {
		t.Fatalf("line %d died, want line 2 (the empty one)", dead.Args.N)
	}
	select {
	case got := <-totals:
		if want := (Total{Words: 4, Counted: 2, Dead: 1}); got != want {
			t.Fatalf("completion found %+v, want %+v", got, want)
		}
	default:
		t.Fatal("the completion job did not run")
	}
}
