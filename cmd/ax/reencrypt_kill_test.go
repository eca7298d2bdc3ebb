package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestPostgresReencryptKilled kills `ax jobs reencrypt` with SIGKILL
// part way, then resumes it with --after the last job it printed: every
// job opens at every moment (a batch is re-sealed whole or not at all),
// the old key is refused removal with a count between the two runs, and
// after the second run no job needs it.
func TestPostgresReencryptKilled(t *testing.T) {
	dsn := pgtest.DSN(t)
	pool := pgtest.PoolFor(t, dsn)
	st, err := pgstore.New(t.Context(), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	k1, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	k2, err := ax.GenerateKey("k2")
	require.NoError(t, err)
	ring1, err := ax.NewKeyRing(k1)
	require.NoError(t, err)
	s, err := ax.New(ax.Config{Store: st, Keys: ring1, Logger: zap.NewNop()})
	require.NoError(t, err)
	const n = 2000
	reqs := make([]ax.Request, 500)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "mail", Payload: map[string]any{"to": "ada@example.com", "i": i}, Options: []ax.ScheduleOption{ax.In(time.Hour)}}
	}
	for range n / len(reqs) {
		_, err := s.ScheduleMany(t.Context(), reqs)
		require.NoError(t, err)
	}
	require.NoError(t, s.Stop(t.Context()))

	file := filepath.Join(t.TempDir(), "ring.json")
	data, err := ax.MarshalKeyRing(k2, k1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	bin := buildCLI(t)

	// The first run, killed after a few batches.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--database-url", dsn, "--encryption-keys", file, "jobs", "reencrypt", "--batch", "5")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lastRE := regexp.MustCompile(`last ([0-9a-f-]{36})$`)
	var last string
	lines := bufio.NewScanner(stderr)
	for i := 0; i < 20 && lines.Scan(); i++ {
		m := lastRE.FindStringSubmatch(lines.Text())
		require.NotNil(t, m, "progress line %q", lines.Text())
		last = m[1]
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.NotEmpty(t, last)

	ring12, err := ax.NewKeyRing(k2, k1)
	require.NoError(t, err)
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring12, Logger: zap.NewNop()})
	require.NoError(t, err)
	requireAllOpen(t, admin, n)
	var inUse *ax.KeyInUseError
	require.ErrorAs(t, admin.CheckKeyRemoval(t.Context(), "k1"), &inUse)
	require.Greater(t, inUse.Jobs, int64(0))
	require.Less(t, inUse.Jobs, int64(n), "the killed run re-sealed nothing")
	t.Logf("killed after %d of %d jobs re-sealed", n-inUse.Jobs, n)

	// The second run resumes after the last job the first one printed.
	out := mustCLI(t, binaryCLI(bin), "--database-url", dsn, "--encryption-keys", file, "jobs", "reencrypt", "--after", last, "--json")
	require.Contains(t, out, `"key": "k2"`)
	require.NoError(t, admin.CheckKeyRemoval(t.Context(), "k1"))
	ring2, err := ax.NewKeyRing(k2)
	require.NoError(t, err)
	only2, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring2, Logger: zap.NewNop()})
	require.NoError(t, err)
	requireAllOpen(t, only2, n)
}

// requireAllOpen requires that a opens each of the n stored jobs.
func requireAllOpen(t *testing.T, a *ax.Admin, n int) {
	t.Helper()
	seen, cursor := 0, ""
	for {
		page, err := a.List(t.Context(), ax.ListOptions{Limit: 1000, Cursor: cursor})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			require.False(t, ax.IsSealed(j.Payload), "job %s does not open: %s", j.ID, j.Payload)
			require.Contains(t, string(j.Payload), "ada@example.com")
			seen++
		}
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	require.Equal(t, n, seen)
}
