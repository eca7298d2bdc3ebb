package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/citustest"
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

// TestQuick runs the scenarios at tiny sizes so the program cannot rot.
// It checks that each printed its figures and the correctness ones
// (nothing early, no job lost), never a timing target. The scenarios run
// in parallel, each in databases of its own: their figures mean nothing
// here, and most of their time is waiting.
func TestQuick(t *testing.T) {
	url := serverURL(t)
	common := []string{"-quick", "-json", "-db", url}
	for _, tc := range []struct {
		scenario string
		args     []string
		metric   string // one metric the scenario must print
		positive bool   // metric must be above 0
		rtt      string // the added round trip the server's label must name
	}{
		{"throughput", []string{"-n", "1000"}, "W=100: WAL per job", false, "0s"},
		// Half the jobs aged Normal, half High: aging mixes the ranges.
		{"throughput", []string{"-n", "1000", "-aged-mix"}, "W=100: WAL per job", false, "0s"},
		{"throughput", []string{"-n", "300", "-workers", "100", "-encrypt", "-encrypt-reps", "1", "-encrypt-bytes", "3072"},
			"W=100: backends' CPU per job (insert and run), encrypted minus plain (medians)", false, "0s"},
		{"insert", nil, "Schedule call p99", false, "0s"},
		{"lag", []string{"-lag-jobs", "100", "-lag-min", "500ms", "-lag-max", "1500ms"}, "started early (store clock)", false, "0s"},
		{"immediate", []string{"-immediate-for", "500ms"}, "start lag, store clock, p99", false, "0s"},
		{"immediate", []string{"-immediate-for", "300ms", "-immediate-floor", "300ms"}, "commit floor: one-row INSERT round trip p99", false, "0s"},
		// With pgstore.WithEarlyDirectStart handlers start before their
		// Schedule calls return, through the Scheduler on PostgreSQL.
		{"immediate", []string{"-immediate-for", "300ms", "-immediate-floor", "0", "-early-start"}, "handler started before Schedule returned", true, "0s"},
		{"bigtable", []string{"-bigtable-sizes", "2000", "-bigtable-workers", "100", "-bigtable-for", "300ms", "-bigtable-warmup", "100ms", "-feed-batch", "500"},
			"W=100: 2k finished / empty", false, "0s"},
		{"heldxmin", []string{"-heldxmin-clean", "1s", "-heldxmin-hold", "1s", "-heldxmin-recovery", "1s", "-heldxmin-window", "500ms"},
			"held / clean completion rate", false, "0s"},
		{"wide", []string{"-wide-for", "600ms", "-wide-interval", "300ms", "-feed-batch", "500"}, "W=1000 / W=100 jobs/s", false, "0s"},
		{"noisy", []string{"-noisy-for", "1s", "-noisy-hang", "500ms"}, "sqlite, 3 partitions, 1 bad: healthy p99 added by the bad", false, "0s"},
		// Through the delay proxy, worker processes included.
		{"multiprocess", []string{"-n", "300", "-procs", "2", "-mp-workers", "10", "-rtt", "1ms"}, "jobs succeeded", false, "1ms"},
		// High-priority probes while the backlog is worked: they run, once
		// each (the duplicate and success checks count them), and are timed.
		{"multiprocess", []string{"-n", "3000", "-procs", "2", "-mp-workers", "10", "-probe-every", "1ms"},
			"High-priority probes run during the backlog", true, "0s"},
		{"multiprocess", []string{"-n", "300", "-procs", "2", "-mp-workers", "10"}, "claim → handler start p99", true, "0s"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			args := append(append(append([]string(nil), common...), tc.args...), tc.scenario)
			r, ok := runJSON(t, args)[tc.scenario]
			if !ok {
				t.Fatalf("%s printed nothing", tc.scenario)
			}
			if !hasMetric(r, tc.metric) {
				t.Errorf("no metric %q", tc.metric)
			}
			for _, m := range r.Metrics {
				if tc.positive && m.Name == tc.metric && m.Value <= 0 {
					t.Errorf("%s: %v, want above 0", m.Name, m.Value)
				}
			}
			if !strings.HasPrefix(r.Server, "shared server") {
				t.Errorf("server %q, want the shared server named", r.Server)
			}
			if want := "added round trip " + tc.rtt + ","; !strings.Contains(r.Server, want) {
				t.Errorf("server %q, want %q in it", r.Server, want)
			}
			for _, m := range r.Metrics {
				if m.Name == "started early (store clock)" && m.Value != 0 {
					t.Errorf("%v jobs started early", m.Value)
				}
				switch m.Name { // what every job must have done, probes included
				case "handler calls − jobs (duplicates)", "jobs not at attempt 1", "jobs succeeded":
					if m.Met == nil || !*m.Met {
						t.Errorf("%s: %v, want %s", m.Name, m.Value, m.Target)
					}
				}
			}
		})
	}
}

// TestPrivate starts and removes a private cluster around the insert
// scenario. It needs the PostgreSQL binaries (AXBENCH_PG_BIN, by default
// -pg-bin's) and, as root, the postgres OS user.
func TestPrivate(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("AXBENCH_PG_BIN")
	if bin == "" {
		bin = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		t.Skipf("no initdb in %s (set AXBENCH_PG_BIN): %v", bin, err)
	}
	parent := t.TempDir()
	// As root the cluster runs as the postgres user, who must reach its
	// directory: t.TempDir's directories are private to root.
	for _, dir := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := runJSON(t, []string{"-quick", "-json", "-private", "-private-port", "0", "-private-dir", parent, "-pg-bin", bin,
		"-private-shared-buffers", "128MB", "-private-set", "work_mem=8MB", "insert"})
	r := got["insert"]
	if !strings.HasPrefix(r.Server, "private server") {
		t.Errorf("server %q, want the private one named", r.Server)
	}
	settings := map[string]string{}
	for _, s := range r.Machine.Server.Settings {
		settings[s.Name] = s.Value
	}
	for name, want := range map[string]string{"autovacuum": "on", "synchronous_commit": "on", "shared_buffers": "128MB", "work_mem": "8MB"} {
		if settings[name] != want {
			t.Errorf("setting %s = %q, want %q", name, settings[name], want)
		}
	}
	left, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("private cluster's directory not removed: %v", left)
	}
}

// runJSON runs benchMain with args and returns its results by scenario.
func runJSON(t *testing.T, args []string) map[string]result {
	t.Helper()
	var out, errOut bytes.Buffer
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
	return got
}

func hasMetric(r result, name string) bool {
	for _, m := range r.Metrics {
		if m.Name == name {
			return true
		}
	}
	return false
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuch"}, {"-n", "0", "insert"}, {"-lag-min", "3s", "-lag-max", "2s", "lag"},
		{"-bigtable-sizes", "10,5", "bigtable"}, {"-heldxmin-hold", "0s", "heldxmin"}, {"-private-port", "70000", "insert"},
		{"-rtt", "-1ms", "insert"}, {"-rtt", "1ms", "-via-pgbouncer", "127.0.0.1:6432", "insert"}} {
		if code := benchMain(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestQuickCitus runs the citus scenario at a tiny size on the Citus test
// cluster, with one worker node holding the shards and with two. It holds
// the Citus tests' lock exclusively: the scenario keeps a node from
// taking shards while it distributes its schema.
func TestQuickCitus(t *testing.T) {
	citustest.Exclusive(t)
	got := runJSON(t, []string{"-quick", "-json", "-citus", citustest.URL(), "-n", "300", "-workers", "50", "-citus-nodes", "1,2", "citus"})
	r, ok := got["citus"]
	if !ok {
		t.Fatal("citus printed nothing")
	}
	for _, k := range []int{1, 2} {
		if name := fmt.Sprintf("%d nodes, W=50: jobs/s", k); !hasMetric(r, name) {
			t.Errorf("no metric %q", name)
		}
	}
	rows := r.Tables[0].Rows
	if len(rows) != 2 || strings.Count(rows[0][7], ":") != 1 || strings.Count(rows[1][7], ":") != 2 {
		t.Errorf("jobs per node: %v, want one node then two", rows)
	}
}

// TestQuickCitusIdle runs the citus-idle scenario briefly on the Citus
// test cluster: one idle host's transactions and CPU per second.
func TestQuickCitusIdle(t *testing.T) {
	citustest.Require(t)
	pool := citustest.Pool(t)
	before := benchSchemas(t, pool)
	got := runJSON(t, []string{"-quick", "-json", "-citus", citustest.URL(), "-citus-shards", "8", "-idle-for", "1s", "citus-idle"})
	r, ok := got["citus-idle"]
	if !ok {
		t.Fatal("citus-idle printed nothing")
	}
	for _, name := range []string{"coordinator transactions per second", "worker nodes' transactions per second (summed)",
		"coordinator CPU per second", "this process's CPU per second"} {
		if !hasMetric(r, name) {
			t.Errorf("no metric %q", name)
		}
	}
	for name := range benchSchemas(t, pool) {
		if !before[name] {
			t.Errorf("the scenario left its schema %s on the cluster", name)
		}
	}
}

// benchSchemas returns the names of the schemas axbench's Citus
// scenarios made (axbench_ and 12 hex digits) that the cluster holds.
func benchSchemas(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT nspname FROM pg_namespace WHERE nspname ~ '^axbench_[0-9a-f]{12}$'`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set
}
