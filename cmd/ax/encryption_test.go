package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// TestEncryptionCommands: jobs show without the ring shows "encrypted",
// with it the plain payload; keys remove is refused with a count until
// jobs reencrypt re-sealed the jobs, then drops the key from the file.
func TestEncryptionCommands(t *testing.T) {
	k1, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	k2, err := ax.GenerateKey("k2")
	require.NoError(t, err)
	ring1, err := ax.NewKeyRing(k1)
	require.NoError(t, err)
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st, Keys: ring1, Logger: zap.NewNop()})
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		res, err := s.Schedule(t.Context(), "mail", map[string]any{"to": "ada@example.com", "n": i})
		require.NoError(t, err)
		ids = append(ids, res.ID.String())
	}
	require.NoError(t, s.Stop(context.Background()))

	file := filepath.Join(t.TempDir(), "ring.json")
	data, err := ax.MarshalKeyRing(k2, k1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))

	open := memOpener{st: st, m: &fakeMigrator{}}
	ax := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut, open)
		return out.String(), errOut.String(), code
	}
	out, _, code := ax("jobs", "show", ids[0])
	require.Equal(t, 0, code)
	require.Contains(t, out, "encrypted (key k1)")
	require.NotContains(t, out, "ada@")

	out, _, code = ax("--encryption-keys", file, "jobs", "show", ids[0])
	require.Equal(t, 0, code)
	require.Contains(t, out, `"to":"ada@example.com"`)

	_, errOut, code := ax("--encryption-keys", file, "keys", "remove", "k1")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, `key "k1" seals 3 job(s)`)

	_, _, code = ax("jobs", "reencrypt")
	require.Equal(t, exitUsage, code, "no ring")
	out, errOut, code = ax("--encryption-keys", file, "jobs", "reencrypt", "--batch", "2")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "3 job(s) scanned, 3 re-sealed with key k2")
	require.Contains(t, errOut, "scanned 2, re-sealed 2, last "+ids[1])

	out, _, code = ax("--encryption-keys", file, "keys", "usage")
	require.Equal(t, 0, code)
	require.Regexp(t, `k1\s+0\s+0\s+yes`, out)
	require.Regexp(t, `k2\s+3\s+0\s+current`, out)

	out, errOut, code = ax("--encryption-keys", file, "keys", "remove", "k1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "key k1 removed")
	left, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NotContains(t, string(left), `"k1"`)
	out, _, code = ax("--encryption-keys", file, "jobs", "show", ids[2])
	require.Equal(t, 0, code)
	require.Contains(t, out, `"n":2`)
}
