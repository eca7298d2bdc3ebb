package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	const base = `{
	  "paths": {
	    "/api/v1/jobs": {
	      "get": {"parameters": [{"in": "query", "name": "state", "schema": {"type": "string", "enum": ["scheduled", "running"]}}]},
	      "post": {"requestBody": {"content": {"application/json": {"schema": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}, "payload": {}}}}}}}
	    }
	  },
	  "components": {"schemas": {"Job": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "attempts": {"type": "array", "items": {"type": "object", "properties": {"node": {"type": "string"}}}}}}}}
	}`
	tests := []struct {
		name string
		edit func(d doc)
		want string // a substring of the one problem expected; "" for none
	}{
		{"unchanged", func(doc) {}, ""},
		{"path added", func(d doc) { obj(d["paths"])["/api/v1/new"] = map[string]any{"get": map[string]any{}} }, ""},
		{"optional property added", func(d doc) {
			obj(obj(obj(obj(d["components"])["schemas"])["Job"])["properties"])["extra"] = map[string]any{"type": "string"}
		}, ""},
		{"enum value added", func(d doc) {
			p := obj(arr(obj(obj(obj(d["paths"])["/api/v1/jobs"])["get"])["parameters"])[0])
			obj(p["schema"])["enum"] = []any{"scheduled", "running", "paused"}
		}, ""},
		{"path removed", func(d doc) { delete(obj(d["paths"]), "/api/v1/jobs") }, "path /api/v1/jobs removed"},
		{"operation removed", func(d doc) { delete(obj(obj(d["paths"])["/api/v1/jobs"]), "post") }, "post /api/v1/jobs removed"},
		{"parameter removed", func(d doc) { obj(obj(obj(d["paths"])["/api/v1/jobs"])["get"])["parameters"] = []any{} }, "parameter query:state removed"},
		{"parameter now required", func(d doc) {
			obj(arr(obj(obj(obj(d["paths"])["/api/v1/jobs"])["get"])["parameters"])[0])["required"] = true
		}, "parameter query:state now required"},
		{"new required parameter", func(d doc) {
			op := obj(obj(obj(d["paths"])["/api/v1/jobs"])["get"])
			op["parameters"] = append(arr(op["parameters"]), map[string]any{"in": "query", "name": "x", "required": true})
		}, "new required parameter query:x"},
		{"enum value removed", func(d doc) {
			p := obj(arr(obj(obj(obj(d["paths"])["/api/v1/jobs"])["get"])["parameters"])[0])
			obj(p["schema"])["enum"] = []any{"scheduled"}
		}, "value running removed"},
		{"request property now required", func(d doc) {
			s := requestSchema(obj(obj(d["paths"])["/api/v1/jobs"])["post"])
			s["required"] = []any{"kind", "payload"}
		}, "property payload now required"},
		{"schema property removed", func(d doc) {
			delete(obj(obj(obj(obj(d["components"])["schemas"])["Job"])["properties"]), "id")
		}, "schema Job: property id removed"},
		{"nested property retyped", func(d doc) {
			props := obj(obj(obj(obj(d["components"])["schemas"])["Job"])["properties"])
			obj(obj(obj(props["attempts"])["items"])["properties"])["node"] = map[string]any{"type": "integer"}
		}, "schema Job.attempts[].node: type integer, was string"},
		{"schema removed", func(d doc) { delete(obj(obj(d["components"])["schemas"]), "Job") }, "schema Job removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old, cur doc
			if err := json.Unmarshal([]byte(base), &old); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(base), &cur); err != nil {
				t.Fatal(err)
			}
			tt.edit(cur)
			got := compare(old, cur)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("compatible change reported: %q", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("got %q, want one problem containing %q", got, tt.want)
			}
		})
	}
}
