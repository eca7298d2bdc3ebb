package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestObservability runs the example briefly: the failing kind alerts once
// per rule, and the final scrape has the job counters.
func TestObservability(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, options{addr: "127.0.0.1:0", duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{
		"serving metrics on http://127.0.0.1:",
		`ax_jobs_succeeded_total{kind="email.send"}`,
		`ax_jobs_dead_total{kind="invoice.render"}`,
		"invoice.render  started",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, alert := range []string{"ALERT consecutive_failures invoice.render", "ALERT success_rate invoice.render"} {
		if n := strings.Count(got, alert); n != 1 {
			t.Errorf("%q printed %d times, want once", alert, n)
		}
	}
	if strings.Contains(got, "email.send:") {
		t.Error("the healthy kind alerted")
	}
}
