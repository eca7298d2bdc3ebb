package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// testKeys returns two new keys, k1 and k2, and a ring of k1 alone.
func testKeys(t *testing.T) (k1, k2 ax.Key, ring1 *ax.KeyRing) {
	t.Helper()
	k1, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	k2, err = ax.GenerateKey("k2")
	require.NoError(t, err)
	ring1, err = ax.NewKeyRing(k1)
	require.NoError(t, err)
	return k1, k2, ring1
}

// TestEncryptionCommands: jobs show without the ring shows "encrypted",
// with it the plain payload; keys remove is refused with a count until
// jobs reencrypt re-sealed the jobs, then drops the key from the file.
func TestEncryptionCommands(t *testing.T) {
	k1, k2, ring1 := testKeys(t)
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
	require.Regexp(t, `KEY\s+JOBS\s+SCHEDULES\s+BATCHES\s+IN RING`, out)
	require.Regexp(t, `k1\s+0\s+0\s+0\s+yes`, out)
	require.Regexp(t, `k2\s+3\s+0\s+0\s+current`, out)

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

// TestEncryptionCommandsBatch: the completion job of a running batch,
// which the store holds apart, is counted by keys usage (batches) and
// keys remove, and re-sealed by jobs reencrypt.
func TestEncryptionCommandsBatch(t *testing.T) {
	k1, k2, ring1 := testKeys(t)
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st, Keys: ring1, Logger: zap.NewNop()})
	require.NoError(t, err)
	_, err = s.ScheduleBatch(t.Context(), ax.Batch{
		Children:   []ax.Request{{Kind: "part", Payload: map[string]any{"n": 1}}, {Kind: "part", Payload: map[string]any{"n": 2}}},
		Completion: ax.Request{Kind: "report", Payload: map[string]any{"to": "ada@example.com"}},
	})
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()))
	file := filepath.Join(t.TempDir(), "ring.json")
	data, err := ax.MarshalKeyRing(k2, k1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	open := memOpener{st: st, m: &fakeMigrator{}}
	cli := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append([]string{"--encryption-keys", file}, args...), strings.NewReader(""), &out, &errOut, open)
		return out.String(), errOut.String(), code
	}
	cases := []struct {
		name string
		args []string
		code int
		out  []string // substrings of stdout, or of stderr when code is not 0
		re   []string // patterns it matches
	}{
		{"UsageBefore", []string{"keys", "usage", "--json"}, 0,
			[]string{`"key": "k1"`, `"jobs": 2`, `"batches": 1`}, nil},
		{"RemoveRefused", []string{"keys", "remove", "k1"}, exitError,
			[]string{`key "k1" seals 2 job(s), 0 schedule template(s) and 1 completion job(s) of running batches`}, nil},
		{"Reencrypt", []string{"jobs", "reencrypt"}, 0, []string{"3 job(s) scanned, 3 re-sealed with key k2"}, nil},
		{"UsageAfter", []string{"keys", "usage"}, 0, nil,
			[]string{`k1\s+0\s+0\s+0\s+yes`, `k2\s+2\s+0\s+1\s+current`}},
		{"Removed", []string{"keys", "remove", "k1"}, 0, []string{"key k1 removed"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := cli(c.args...)
			require.Equal(t, c.code, code, errOut)
			if code != 0 {
				out = errOut
			}
			for _, o := range c.out {
				require.Contains(t, out, o)
			}
			for _, re := range c.re {
				require.Regexp(t, re, out)
			}
		})
	}
}

// TestEncryptionCommandsSealPlain: jobs stored plain before the keys are
// sealed by jobs reencrypt --seal-plain (the metadata --secret-metadata
// names too), and then show as encrypted without the ring; a second run
// seals nothing.
func TestEncryptionCommandsSealPlain(t *testing.T) {
	k1, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		res, err := s.Schedule(t.Context(), "mail", map[string]any{"to": "ada@example.com", "n": i},
			ax.Metadata(map[string]string{"token": "tok-secret", "tenant": "acme"}))
		require.NoError(t, err)
		ids = append(ids, res.ID.String())
	}
	require.NoError(t, s.Stop(context.Background()))
	file := filepath.Join(t.TempDir(), "ring.json")
	data, err := ax.MarshalKeyRing(k1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, data, 0o600))
	open := memOpener{st: st, m: &fakeMigrator{}}
	cli := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut, open)
		return out.String(), errOut.String(), code
	}

	cases := []struct {
		name    string
		args    []string
		code    int
		out     []string
		errOut  string
		showOut []string // jobs show ids[0] without the ring, after
	}{
		{"MetadataNeedsSealPlain", []string{"--secret-metadata", "token"}, exitUsage, nil, "--secret-metadata needs --seal-plain",
			[]string{`"to":"ada@example.com"`}},
		{"WithoutSealPlain", nil, 0, []string{"3 job(s) scanned, 0 re-sealed with key k1"}, "",
			[]string{`"to":"ada@example.com"`}},
		{"SealPlain", []string{"--seal-plain", "--secret-metadata", "token", "--batch", "2"}, 0,
			[]string{"3 job(s) scanned, 3 re-sealed with key k1", "3 of the re-sealed held plain values, now sealed; 0 job(s) keep"},
			"scanned 2, re-sealed 2 (2 were plain), last " + ids[1],
			[]string{"encrypted (key k1)", "acme"}},
		{"Again", []string{"--seal-plain", "--secret-metadata", "token", "--json"}, 0,
			[]string{`"scanned": 3`, `"resealed": 0`, `"sealed": 0`, `"left_plain": 0`}, "",
			[]string{"encrypted (key k1)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := cli(append([]string{"--encryption-keys", file, "jobs", "reencrypt"}, c.args...)...)
			require.Equal(t, c.code, code, errOut)
			for _, o := range c.out {
				require.Contains(t, out, o)
			}
			require.Contains(t, errOut, c.errOut)
			shown, _, code := cli("jobs", "show", ids[0])
			require.Equal(t, 0, code)
			for _, o := range c.showOut {
				require.Contains(t, shown, o)
			}
		})
	}
	rec, err := st.Get(t.Context(), uuid.MustParse(ids[2]))
	require.NoError(t, err)
	require.Equal(t, "k1", ax.SealedKeyID(rec.Metadata["token"]))
	require.Equal(t, "acme", rec.Metadata["tenant"])
	out, _, code := cli("--encryption-keys", file, "jobs", "show", ids[2])
	require.Equal(t, 0, code)
	require.Contains(t, out, `"n":2`)
	require.Contains(t, out, "tok-secret")
}

// TestServeOnEncryptedCluster: ax serve without the key ring, on a
// cluster whose stored jobs are sealed, refuses to start (it would store
// the jobs submitted through its API plain, silently); --read-only (it
// stores nothing) and --plain (the operator says so, and it warns)
// start. It used to start and store them plain without a word.
func TestServeOnEncryptedCluster(t *testing.T) {
	_, _, ring1 := testKeys(t)
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st, Keys: ring1, Logger: zap.NewNop()})
	require.NoError(t, err)
	res, err := s.Schedule(t.Context(), "mail", map[string]any{"to": "ada@example.com"})
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()))
	open := memOpener{st: st, m: &fakeMigrator{}}

	serve := func(args ...string) (int, string) { return serveExit(t, open, args...) }
	code, errOut := serve()
	require.Equal(t, exitUsage, code, "ax serve started without the ring on an encrypted cluster: %s", errOut)
	require.Contains(t, errOut, "the cluster encrypts its jobs (job "+res.ID.String()+" is sealed with key k1)")
	require.Contains(t, errOut, "--encryption-keys")

	code, _ = serve("--read-only")
	require.Equal(t, -1, code, "--read-only stores nothing: it starts")
	code, errOut = serve("--plain")
	require.Equal(t, -1, code, "--plain starts")
	require.Contains(t, errOut, "jobs submitted through the API are stored plain")
}

// serveExit runs ax serve on open with args until it exits or listens; it
// returns its exit code, or -1 once it listened (then stopped), and what
// it wrote to stderr.
func serveExit(t *testing.T, open memOpener, args ...string) (int, string) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--no-auth", "--addr", "127.0.0.1:0"}, args...), strings.NewReader(""), &out, &errOut, open)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-done:
			return code, errOut.String()
		default:
		}
		if strings.Contains(out.String(), "listening on") {
			cancel()
			require.Equal(t, 0, <-done, "%v: %s", args, errOut.String())
			return -1, errOut.String()
		}
		require.True(t, time.Now().Before(deadline), "%v: ax serve neither started nor exited: %s %s", args, out.String(), errOut.String())
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeBesideEncryptingNode: a running host with a key ring says so
// in its heartbeat (its keys' IDs), and ax serve without the ring refuses
// even before any sealed job is stored; once that host stopped (and no
// sealed job is left), it starts.
func TestServeBesideEncryptingNode(t *testing.T) {
	_, _, ring1 := testKeys(t)
	st := memstore.New()
	s, err := ax.New(ax.Config{Store: st, Keys: ring1, Node: "worker-1", Logger: zap.NewNop()})
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	open := memOpener{st: st, m: &fakeMigrator{}}

	code, errOut := serveExit(t, open)
	require.Equal(t, exitUsage, code, "ax serve started without the ring beside an encrypting host: %s", errOut)
	require.Contains(t, errOut, "the cluster encrypts its jobs (node worker-1 holds keys k1)")

	require.NoError(t, s.Stop(context.Background()))
	code, errOut = serveExit(t, open)
	require.Equal(t, -1, code, "no running node holds keys and no job is sealed: %s", errOut)
}
