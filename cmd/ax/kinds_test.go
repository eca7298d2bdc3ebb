package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestKindsListUnhandled: `ax kinds list` says a kind's own status
// (active, paused, unhandled) in STATUS and its paused jobs in PAUSED
// JOBS, so neither reads as the other; an unhandled kind (jobs due past
// the grace, no running node handles it) is flagged in the table, with a
// note, and in --json.
func TestKindsListUnhandled(t *testing.T) {
	ctx := t.Context()
	var offset atomic.Int64 // store clock minus real time
	st := memstore.New(memstore.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
	// A worker that handles email and report registered an hour ago.
	offset.Store(int64(-time.Hour))
	require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker", Kinds: []string{"email", "report"}, TTL: 2 * time.Hour}))
	offset.Store(0)
	due := time.Now().Add(-10 * time.Minute)
	for _, kind := range []string{"email", "emial", "emial", "reprot"} {
		insertJob(t, st, kind, due)
	}
	paused := insertJob(t, st, "email", due)
	_, err := st.Control(ctx, paused, store.OpPause)
	require.NoError(t, err)
	_, err = st.SetKindPaused(ctx, "reprot", true)
	require.NoError(t, err)
	cli := func(args ...string) string {
		var out, errOut bytes.Buffer
		code := run(ctx, args, strings.NewReader(""), &out, &errOut, memOpener{st: st, m: &fakeMigrator{}})
		require.Zero(t, code, errOut.String())
		return out.String()
	}

	table := cli("kinds", "list")
	t.Log("\n" + table)
	lines := strings.Split(table, "\n")
	fields := func(line string) []string { return strings.Split(strings.Join(strings.Fields(line), " "), " ") }
	require.Equal(t, "KIND STATUS SCHEDULED RETRYING RUNNING PAUSED JOBS DEAD BREAKER LIMITS NODES", strings.Join(fields(lines[0]), " "))
	cases := []struct {
		line int
		want string
	}{
		{1, "email active 1 - - 1 - - - worker"},
		{2, "emial unhandled 2 - - - - - - -"},
		{3, "report active - - - - - - - worker"},
		{4, "reprot paused,unhandled 1 - - - - - - -"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, strings.Join(fields(lines[c.line]), " "), "line %d", c.line)
	}
	require.Contains(t, lines[6], "2 kind(s) unhandled: jobs due for more than 5m0s and no running node handles the kind")

	var res struct{ Kinds []ax.KindState }
	require.NoError(t, json.Unmarshal([]byte(cli("kinds", "list", "--json")), &res))
	unhandled := map[string]bool{}
	for _, k := range res.Kinds {
		unhandled[k.Kind] = k.Unhandled
	}
	require.Equal(t, map[string]bool{"email": false, "emial": true, "report": false, "reprot": true}, unhandled)
}

// insertJob stores a job of kind due at runAt and returns its ID.
func insertJob(t *testing.T, st store.Store, kind string, runAt time.Time) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	_, err := st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3, RunAt: runAt}})
	require.NoError(t, err)
	return id
}
