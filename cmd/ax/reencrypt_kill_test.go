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
// between the two runs some jobs but not all hold the current key (for
// a rotation, the old key is refused removal with a count), and after the
// second run every job holds it. Two cases: a rotation from k1 to k2, and
// --seal-plain on jobs stored before the keys.
func TestPostgresReencryptKilled(t *testing.T) {
	k1, k2, ring1 := testKeys(t)
	ring12, err := ax.NewKeyRing(k2, k1)
	require.NoError(t, err)
	ring2, err := ax.NewKeyRing(k2)
	require.NoError(t, err)
	bin := buildCLI(t)
	cases := []struct {
		name     string
		producer *ax.KeyRing // nil: jobs stored plain
		file     []ax.Key    // the ring given to the command, current first
		flags    []string
		during   *ax.KeyRing // opens every job between the runs
		after    *ax.KeyRing // opens every job after the second run
	}{
		{"Rotation", ring1, []ax.Key{k2, k1}, nil, ring12, ring2},
		{"SealPlain", nil, []ax.Key{k1}, []string{"--seal-plain"}, ring1, ring1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn := pgtest.DSN(t) // a database of the case's own
			pool := pgtest.PoolFor(t, dsn)
			st, err := pgstore.New(t.Context(), pool)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			s, err := ax.New(ax.Config{Store: st, Keys: c.producer, Logger: zap.NewNop()})
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
			data, err := ax.MarshalKeyRing(c.file[0], c.file[1:]...)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(file, data, 0o600))
			current := c.file[0].ID

			// The first run, killed after a few batches.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			args := append([]string{"--database-url", dsn, "--encryption-keys", file, "jobs", "reencrypt", "--batch", "5"}, c.flags...)
			cmd := exec.CommandContext(ctx, bin, args...)
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

			during, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: c.during, Logger: zap.NewNop()})
			require.NoError(t, err)
			requireAllOpen(t, during, n)
			usage, _, err := during.KeyUsage(t.Context())
			require.NoError(t, err)
			require.Greater(t, usage[current], int64(0), "the killed run sealed nothing")
			require.Less(t, usage[current], int64(n), "the killed run was not killed")
			t.Logf("killed after %d of %d jobs sealed with %s", usage[current], n, current)
			if c.producer != nil {
				var inUse *ax.KeyInUseError
				require.ErrorAs(t, during.CheckKeyRemoval(t.Context(), "k1"), &inUse)
				require.Equal(t, int64(n)-usage[current], inUse.Jobs)
			}

			// The second run resumes after the last job the first one printed.
			out := mustCLI(t, binaryCLI(bin), append(append([]string{}, args[:6]...), append([]string{"--after", last, "--json"}, c.flags...)...)...)
			require.Contains(t, out, `"key": "`+current+`"`)
			usage, _, err = during.KeyUsage(t.Context())
			require.NoError(t, err)
			require.Equal(t, map[string]int64{current: n}, usage)
			after, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: c.after, Logger: zap.NewNop()})
			require.NoError(t, err)
			requireAllOpen(t, after, n)
		})
	}
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
