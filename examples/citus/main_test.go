package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/citustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCitus runs the example on the Citus test cluster: every order
// ships, and the jobs lie on both worker nodes.
func TestCitus(t *testing.T) {
	citustest.Require(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-url", citustest.URL(), "-orders", "60"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "60 orders shipped") || strings.Count(out.String(), ":54") != 2 {
		t.Fatalf("output: %s", out.String())
	}
	t.Log(out.String())
}
