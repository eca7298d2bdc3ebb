package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store/memstore"
)

// TestJSONDocumentsOnEmptyStore: with --json every listing prints
// exactly one JSON document on an empty store, its lists [] rather than
// null, as the package documentation promises.
func TestJSONDocumentsOnEmptyStore(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "list"}, `{"jobs": []}`},
		{[]string{"jobs", "retry", "--kind", "none", "--yes"}, `{"operation": "retry", "matched": 0, "changed": 0}`},
		{[]string{"periodic", "list"}, `{"schedules": []}`},
		{[]string{"kinds", "list"}, `{"kinds": []}`},
		{[]string{"keys", "usage"}, `[]`},
		{[]string{"migrate", "status"}, `{"database": 2, "binary": 2, "status": "up-to-date"}`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			cli := inProcess(memOpener{st: memstore.New(), m: &fakeMigrator{db: 2, bin: 2}})
			out, errOut, code := cli(t, append(tc.args, "--json")...)
			require.Zero(t, code, errOut)
			require.Empty(t, errOut)
			dec := json.NewDecoder(strings.NewReader(out))
			var doc json.RawMessage
			require.NoError(t, dec.Decode(&doc))
			require.False(t, dec.More(), "one document")
			require.JSONEq(t, tc.want, string(doc))
		})
	}
	// nodes: no node, and a leader only when the store tells one.
	out, _, code := inProcess(memOpener{st: memstore.New()})(t, "nodes", "--json")
	require.Zero(t, code)
	var nodes map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &nodes))
	require.Equal(t, []any{}, nodes["nodes"])
}
