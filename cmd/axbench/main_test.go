package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" { // re-executed as a worker process
		os.Exit(workerMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// serverURL returns pgtest's server, or skips (fails under
// AX_REQUIRE_POSTGRES=1) when none answers, as internal/pgtest does.
func serverURL(t *testing.T) string {
	t.Helper()
	url := pgtest.ServerURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		msg := "PostgreSQL not reachable (" + err.Error() + "): set TEST_DATABASE_URL to a server's URL to run these tests"
		if os.Getenv("AX_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("%s (AX_REQUIRE_POSTGRES=1)", msg)
		}
		t.Skip(msg)
	}
	conn.Close(ctx)
	return url
}

// TestQuick runs the cheap scenarios at -quick sizes so the program cannot
// rot. It checks that each printed its figures and the correctness ones
// (nothing early, no job lost), never a timing target.
func TestQuick(t *testing.T) {
	url := serverURL(t)
	var out, errOut bytes.Buffer
	args := []string{"-quick", "-json", "-db", url, "-n", "1000", "-lag-jobs", "100", "-lag-min", "500ms", "-lag-max", "1500ms",
		"throughput", "lag", "insert"}
	if code := benchMain(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut.String())
	}
	dec := json.NewDecoder(&out)
	got := map[string]result{}
	for {
		var r result
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got[r.Scenario] = r
	}
	for _, name := range []string{"throughput", "lag", "insert"} {
		if len(got[name].Metrics) == 0 {
			t.Errorf("%s printed no metrics", name)
		}
	}
	for _, m := range got["lag"].Metrics {
		if m.Name == "started early" && m.Value != 0 {
			t.Errorf("lag: %v jobs started early", m.Value)
		}
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuch"}, {"-n", "0", "insert"}, {"-lag-min", "3s", "-lag-max", "2s", "lag"}} {
		if code := benchMain(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
