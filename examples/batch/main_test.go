package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBatch runs the example on SQLite and PostgreSQL: the completion job
// runs once, after every child, and sees the dead one.
func TestBatch(t *testing.T) {
	demotest.OnEachStore(t, run, []string{
		": 5 children, completion job ",
		"children: 4 succeeded, 1 dead, 0 pending",
		"completion: 27 words in 4 lines, 1 line(s) dead",
	}, nil)
}
