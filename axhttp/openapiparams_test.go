package axhttp

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenAPIDocumentsQueryParameters: the query parameters a route
// accepts (the lists its handler checks requests against) are the ones
// openapi.json documents for it, so that a filter added to the code (as
// parent was) cannot be left out of the document, nor a documented one be
// refused.
func TestOpenAPIDocumentsQueryParameters(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPIDoc, &doc))
	documented := func(path, method string) []string {
		op, ok := doc.Paths[path][method]
		require.True(t, ok, "%s %s is not documented", method, path)
		var out []string
		for _, p := range op.Parameters {
			if p.In == "query" {
				out = append(out, p.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	sorted := func(lists ...[]string) []string {
		out := slices.Concat(lists...)
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		path, method string
		accepted     []string
	}{
		{"/api/v1/jobs", "get", listParams},
		{"/api/v1/jobs/count", "get", filterParams},
		{"/api/v1/jobs/{id}/followups", "get", followUpParams},
	} {
		require.Equal(t, sorted(c.accepted), documented(c.path, c.method), "%s %s", c.method, c.path)
	}
}
