package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// cliFunc runs the CLI with args and returns its stdout, stderr and exit
// code: in-process (run) or as a subprocess (the built binary).
type cliFunc func(t *testing.T, args ...string) (stdout, stderr string, code int)

// mustCLI runs the CLI and requires exit code 0.
func mustCLI(t *testing.T, cli cliFunc, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, args...)
	require.Zero(t, code, "ax %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, errOut)
	return out
}

// waitUntil polls cond until it holds, failing after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// operateHeartbeat is the scenario's HeartbeatInterval (LeaseDuration/3):
// how often hosts re-read the paused kinds.
const operateHeartbeat = 200 * time.Millisecond

// operateScenario is an operator's first week, against st, through cli,
// with a host running jobs in this process: jobs die while a downstream
// is down; the operator lists them with filters, retries them in bulk and
// watches them succeed; then pauses a kind while its jobs are due and
// running: none starts while paused, the running ones finish, all run
// after the resume. It needs st to implement the operator interfaces.
func operateScenario(t *testing.T, st store.Store, cli cliFunc) {
	ctx := t.Context()
	core, logs := observer.New(zapcore.InfoLevel)
	var broken atomic.Bool
	broken.Store(true)
	release := make(chan struct{})
	var slowStarted atomic.Int64
	s, err := ax.New(ax.Config{
		Store: st, Node: "e2e-host", Logger: zap.New(core),
		LeaseDuration: 3 * operateHeartbeat, PollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, s.Handle("e2e.flaky", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		if broken.Load() {
			return ax.Permanent(errors.New("downstream unavailable"))
		}
		return nil
	})))
	require.NoError(t, s.Handle("e2e.slow", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		slowStarted.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), ax.Concurrency(2)))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	})
	admin := s.Admin() // for waiting only; the operator uses the CLI
	count := func(kind string, state ax.State) int64 {
		n, err := admin.Count(ctx, ax.JobFilter{Kinds: []string{kind}, States: []ax.State{state}})
		require.NoError(t, err)
		return n
	}

	// Jobs die while the downstream is down.
	for range 20 {
		_, err := s.Schedule(ctx, "e2e.flaky", map[string]int{"n": 1}, ax.MaxAttempts(1), ax.Metadata(map[string]string{"tenant": "acme"}))
		require.NoError(t, err)
	}
	waitUntil(t, "20 dead jobs", func() bool { return count("e2e.flaky", ax.StateDead) == 20 })

	// The operator lists them with filters, as JSON and as a table.
	out := mustCLI(t, cli, "jobs", "list", "--kind", "e2e.flaky", "--state", "dead", "--error-contains", "downstream",
		"--meta", "tenant=acme", "--node", "e2e-host", "--limit", "1000", "--json")
	var list ax.JobList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Jobs, 20)
	for _, j := range list.Jobs {
		require.Equal(t, ax.StateDead, j.State)
		require.Contains(t, j.Errors[0].Error, "downstream unavailable")
	}
	out = mustCLI(t, cli, "jobs", "list", "--kind", "e2e.flaky", "--state", "dead", "--limit", "5", "--order", "oldest")
	require.Contains(t, out, "downstream unavailable")
	require.Contains(t, out, "next page: --cursor ")

	// The downstream is back: retry them in bulk and watch them succeed.
	broken.Store(false)
	out = mustCLI(t, cli, "jobs", "retry", "--kind", "e2e.flaky", "--state", "dead", "--yes", "--batch", "7", "--json")
	var res bulkResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, bulkResult{Operation: "retry", Matched: 20, Changed: 20}, res)
	waitUntil(t, "20 retried jobs succeeded", func() bool { return count("e2e.flaky", ax.StateSucceeded) == 20 })

	// Pause a kind while two of its jobs run.
	for range 2 {
		_, err := s.Schedule(ctx, "e2e.slow", nil)
		require.NoError(t, err)
	}
	waitUntil(t, "2 slow jobs running", func() bool { return count("e2e.slow", ax.StateRunning) == 2 })
	out = mustCLI(t, cli, "kinds", "pause", "e2e.slow")
	require.Contains(t, out, "paused kind e2e.slow")
	waitUntil(t, "the host read the pause", func() bool {
		return logs.FilterMessage("kind paused: its jobs are not claimed").FilterField(zap.String("kind", "e2e.slow")).Len() > 0
	})
	for range 4 {
		_, err := s.Schedule(ctx, "e2e.slow", nil)
		require.NoError(t, err)
	}
	close(release) // the running attempts finish, and free their slots
	waitUntil(t, "the running slow jobs finished", func() bool { return count("e2e.slow", ax.StateSucceeded) == 2 })
	// A pause is the absence of starts, which can only be watched for a
	// while: five re-reads of the paused kinds, and many claim rounds.
	time.Sleep(5 * operateHeartbeat)
	require.Equal(t, int64(2), slowStarted.Load(), "a job of the paused kind started")
	require.Equal(t, int64(4), count("e2e.slow", ax.StateScheduled))
	out = mustCLI(t, cli, "kinds", "list", "--json")
	var kinds struct{ Kinds []ax.KindState }
	require.NoError(t, json.Unmarshal([]byte(out), &kinds))
	var slow *ax.KindState
	for i := range kinds.Kinds {
		if kinds.Kinds[i].Kind == "e2e.slow" {
			slow = &kinds.Kinds[i]
		}
	}
	require.NotNil(t, slow, out)
	require.True(t, slow.Paused)
	require.Equal(t, int64(4), slow.Jobs[ax.StateScheduled])
	require.Equal(t, []string{"e2e-host"}, slow.Nodes)

	// Resume: every waiting job runs.
	mustCLI(t, cli, "kinds", "resume", "e2e.slow")
	waitUntil(t, "all slow jobs succeeded", func() bool { return count("e2e.slow", ax.StateSucceeded) == 6 })
	require.Equal(t, int64(6), slowStarted.Load())

	// The cluster as the operator sees it.
	out = mustCLI(t, cli, "nodes", "--json")
	var nodes nodesResult
	require.NoError(t, json.Unmarshal([]byte(out), &nodes))
	require.Len(t, nodes.Nodes, 1)
	require.Equal(t, "e2e-host", nodes.Nodes[0].Name)
	require.Equal(t, ax.NodeRunning, nodes.Nodes[0].State)
	out = mustCLI(t, cli, "stats")
	require.Contains(t, out, "e2e.flaky")
}

// operatorInterfaces lists the operator interfaces st lacks.
func operatorInterfaces(st store.Store) (missing []string) {
	for name, ok := range map[string]bool{
		"store.JobInspector":   implements[store.JobInspector](st),
		"store.BulkController": implements[store.BulkController](st),
		"store.KindPauser":     implements[store.KindPauser](st),
		"store.NodeRegistry":   implements[store.NodeRegistry](st),
		"store.Counter":        implements[store.Counter](st),
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}

func implements[T any](st store.Store) bool {
	_, ok := st.(T)
	return ok
}

// TestOperateInProcess runs the operator scenario on memstore with the
// CLI in-process, so that the scenario itself is known to hold before
// PostgreSQL runs it through the binary (TestPostgresOperate).
func TestOperateInProcess(t *testing.T) {
	st := memstore.New()
	require.Empty(t, operatorInterfaces(st))
	open := memOpener{st: st, m: &fakeMigrator{}}
	operateScenario(t, st, func(t *testing.T, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut, open)
		return out.String(), errOut.String(), code
	})
}
