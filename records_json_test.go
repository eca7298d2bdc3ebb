package ax_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestRecordsMarshalToCleanJSON marshals every public record of the
// operator API, as read from a live memstore cluster, and checks that a
// script can read them: payloads are raw JSON, times RFC 3339, states
// names, and unset times are left out rather than written as year 1.
func TestRecordsMarshalToCleanJSON(t *testing.T) {
	st := newMemstore()
	ctx := t.Context()
	s := newScheduler(t, st, func(c *ax.Config) { c.Node = "json-host" })
	require.NoError(t, s.Handle("json.fail", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return ax.Permanent(errors.New("card declined"))
	})))
	require.NoError(t, s.Every("json.nightly", "0 3 * * *", map[string]string{"report": "sales"}))
	res, err := s.Schedule(ctx, "json.fail", map[string]any{"amount": 12.5, "tags": []string{"a"}},
		ax.Metadata(map[string]string{"tenant": "t1"}))
	require.NoError(t, err)
	_, err = s.Schedule(ctx, "json.later", nil, ax.In(time.Hour))
	require.NoError(t, err)
	_, err = s.Schedule(ctx, "json.unhandled", nil) // due, and no host runs it
	require.NoError(t, err)
	start(t, s)
	waitState(t, st, res.ID, ax.StateDead)
	waitDeclared(t, st, "json.nightly")
	a := s.Admin()
	_, err = a.PauseKind(ctx, "json.later")
	require.NoError(t, err)
	waitFor(t, "node and leader", func() bool {
		l, err := a.Leader(ctx)
		return err == nil && l.Node == "json-host"
	})

	job, err := a.Get(ctx, res.ID)
	require.NoError(t, err)
	list, err := a.List(ctx, ax.ListOptions{Limit: 1})
	require.NoError(t, err)
	nodes, err := a.Nodes(ctx)
	require.NoError(t, err)
	schedules, err := a.Schedules(ctx)
	require.NoError(t, err)
	kinds, err := a.Kinds(ctx)
	require.NoError(t, err)
	leader, err := a.Leader(ctx)
	require.NoError(t, err)
	hostStats, err := s.Stats(ctx)
	require.NoError(t, err)
	clusterStats, err := newAdmin(t, st).Stats(ctx)
	require.NoError(t, err)

	records := []struct {
		name string
		v    any
		// keys must be present at the top level (or in the first element).
		keys []string
		// absent keys must not be (unset times, empty host fields).
		absent []string
	}{
		{"Job", job, []string{"id", "kind", "payload", "metadata", "state", "run_at", "scheduled_at", "attempt", "max_attempts", "errors", "owner", "created_at", "attempted_at", "finished_at"},
			[]string{"lease_token", "lease_expires_at", "unique_key"}},
		{"JobList", list, []string{"jobs", "cursor"}, nil},
		{"Node", nodes[0], []string{"name", "version", "kinds", "state", "leader", "started_at", "heartbeat_at", "expires_at"}, nil},
		{"Schedule", schedules[0], []string{"name", "spec", "time_zone", "kind", "last_tick", "next_tick", "paused", "updated_at", "job"}, nil},
		{"KindState", kinds, []string{"kind", "paused"}, nil},
		{"Leader", leader, []string{"node", "term", "expires_at"}, nil},
		{"HostStats", hostStats, []string{"node", "at", "workers", "queue", "queue_counted", "oldest_due_known", "store_now"}, nil},
		{"ClusterStats", clusterStats, []string{"at", "queue", "queue_counted", "oldest_due", "store_now"},
			[]string{"node", "workers", "running", "dropped_events"}},
	}
	for _, r := range records {
		t.Run(r.name, func(t *testing.T) {
			b, err := json.Marshal(r.v)
			require.NoError(t, err)
			text := string(b)
			require.NotContains(t, text, "0001-01-01", "a zero time leaked: %s", text)
			var top any
			require.NoError(t, json.Unmarshal(b, &top))
			obj, ok := top.(map[string]any)
			if !ok {
				obj = top.([]any)[0].(map[string]any)
			}
			for _, k := range r.keys {
				require.Contains(t, obj, k, "%s", text)
			}
			for _, k := range r.absent {
				require.NotContains(t, obj, k, "%s", text)
			}
			requireRFC3339(t, top)
		})
	}

	// The job in detail: payload raw, state by name, error history kept.
	var decoded map[string]any
	b, _ := json.Marshal(job)
	require.NoError(t, json.Unmarshal(b, &decoded))
	require.Equal(t, map[string]any{"amount": 12.5, "tags": []any{"a"}}, decoded["payload"])
	require.Equal(t, "dead", decoded["state"])
	require.Contains(t, decoded["errors"].([]any)[0].(map[string]any)["error"], "card declined")
	require.JSONEq(t, `{"scheduled":1}`, mustJSON(t, clusterStats.Queue["json.later"]), "states by name")
}

// requireRFC3339 walks v and requires every value of a key naming a time
// ("..._at", "...tick", "store_now", "oldest_due" entries) to be an RFC
// 3339 string.
func requireRFC3339(t *testing.T, v any) {
	t.Helper()
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if key == "oldest_due" {
					k = "oldest_due_at" // its values are times
				}
				walk(k, e)
			}
		case []any:
			for _, e := range x {
				walk(key, e)
			}
		case string:
			if strings.HasSuffix(key, "_at") || strings.HasSuffix(key, "_tick") || key == "store_now" || key == "at" {
				_, err := time.Parse(time.RFC3339Nano, x)
				require.NoError(t, err, "%s: %q", key, x)
			}
		}
	}
	walk("", v)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
