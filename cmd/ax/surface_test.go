package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// cliSurfaceFile lists every field of every --json document, beside the
// Go packages' list (.ci/api-surface). .ci/apicheck fails when a line of
// the last release's copy is missing from it (docs/compatibility.md).
const cliSurfaceFile = "../../.ci/cli-surface"

const cliSurfaceHeader = `# The ax CLI's --json documents (docs/compatibility.md): one line per
# field, "COMMAND: PATH TYPE", "." being the document, "[]" a list's
# elements and ".*" a map's values under any key. Fields left out when
# empty are listed too. Generated from the Go values the commands print by
# cmd/ax's TestCLISurface: AX_UPDATE_SURFACE=1 go test -run TestCLISurface ./ax/
# (in cmd) rewrites it. .ci/apicheck fails when a line of the last
# release's copy is missing here: fields may be added, never renamed or
# removed, and keep their JSON type.
`

// commandsWithoutJSON are the commands that print no JSON document.
var commandsWithoutJSON = map[string]bool{"serve": true}

// watchedOutput is a standard output that keeps the values printJSON
// printed.
type watchedOutput struct {
	bytes.Buffer
	values []any
}

func (o *watchedOutput) watchJSON(v any) { o.values = append(o.values, v) }

// TestCLISurface runs every command that prints JSON on newCluster's
// store, derives the shape of the document from the Go value printed
// (shapeOf) and compares the lines with .ci/cli-surface. A command added
// without a case here fails, so does a document that prints a field the
// derivation missed.
func TestCLISurface(t *testing.T) {
	cases := []struct {
		command string
		args    func(c *cluster) []string
	}{
		{"migrate up", nil},
		{"migrate status", nil},
		{"jobs list", func(*cluster) []string { return []string{"--limit", "2"} }},
		{"jobs count", func(*cluster) []string { return []string{"--state", "dead"} }},
		{"jobs show", func(c *cluster) []string { return []string{c.dead[0].String()} }},
		{"jobs retry", func(c *cluster) []string { return []string{c.dead[0].String(), "--yes"} }},
		{"jobs cancel", func(c *cluster) []string { return []string{c.live[0].String(), "--yes"} }},
		{"jobs delete", func(c *cluster) []string { return []string{c.done.String(), "--yes"} }},
		{"jobs reencrypt", nil},
		{"keys usage", nil},
		{"keys remove", func(*cluster) []string { return []string{"k1"} }},
		{"kinds list", nil},
		{"kinds pause", func(*cluster) []string { return []string{"email.send"} }},
		{"kinds resume", func(*cluster) []string { return []string{"email.send"} }},
		{"kinds open", func(*cluster) []string { return []string{"email.send"} }},
		{"kinds close", func(*cluster) []string { return []string{"email.send"} }},
		{"kinds partitions", func(*cluster) []string { return []string{"email.send"} }},
		{"kinds open-partition", func(*cluster) []string { return []string{"email.send", "acme"} }},
		{"kinds close-partition", func(*cluster) []string { return []string{"email.send", "acme"} }},
		{"periodic list", nil},
		{"periodic pause", func(*cluster) []string { return []string{"nightly"} }},
		{"periodic resume", func(*cluster) []string { return []string{"nightly"} }},
		{"periodic trigger", func(*cluster) []string { return []string{"nightly"} }},
		{"nodes", nil},
		{"stats", nil},
		{"sessions revoke", func(*cluster) []string { return []string{"k1"} }},
	}
	var lines []string
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.command] = true
		c := newCluster(t)
		args := append([]string{"--json", "--encryption-keys", keyRingFile(t)}, strings.Fields(tc.command)...)
		if tc.args != nil {
			args = append(args, tc.args(c)...)
		}
		var out watchedOutput
		var errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut, c.open)
		require.Zero(t, code, "%s: %s", tc.command, errOut.String())
		require.Len(t, out.values, 1, "%s: one JSON document", tc.command)
		shape, err := shapeOf(out.values[0])
		require.NoError(t, err, tc.command)
		var doc any
		require.NoError(t, json.Unmarshal(out.Bytes(), &doc), tc.command)
		require.Empty(t, shape.admits(".", doc), "%s printed what its Go value's type does not say", tc.command)
		for _, l := range shape.lines(".") {
			lines = append(lines, tc.command+": "+l)
		}
	}
	for _, c := range commands {
		if !commandsWithoutJSON[c.path] && !covered[c.path] {
			t.Errorf("command %q has no case in TestCLISurface: add one that reaches its printJSON", c.path)
		}
	}
	compareSurface(t, cliSurfaceFile, cliSurfaceHeader, lines, "cd cmd && AX_UPDATE_SURFACE=1 go test -run TestCLISurface ./ax/")
}

// keyRingFile writes a key ring of two keys, k2 current and k1 (which no
// job needs, so keys remove drops it), and returns its path.
func keyRingFile(t *testing.T) string {
	t.Helper()
	k1, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	k2, err := ax.GenerateKey("k2")
	require.NoError(t, err)
	data, err := ax.MarshalKeyRing(k2, k1)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ring.json")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// compareSurface fails unless the file at path is header and the sorted
// lines; with AX_UPDATE_SURFACE=1 it writes them there instead. The
// failure lists the lines removed (a break of the v1 promise unless the
// old form stays) and added, and says how to rewrite the file.
func compareSurface(t *testing.T, path, header string, lines []string, update string) {
	t.Helper()
	slices.Sort(lines)
	lines = slices.Compact(lines)
	want := header + strings.Join(lines, "\n") + "\n"
	if os.Getenv("AX_UPDATE_SURFACE") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		t.Logf("wrote %s", path)
		return
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err, "run %s to write it", update)
	if string(data) == want {
		return
	}
	var old []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			old = append(old, l)
		}
	}
	var msg strings.Builder
	for _, l := range old {
		if !slices.Contains(lines, l) {
			msg.WriteString("\n  - " + l)
		}
	}
	for _, l := range lines {
		if !slices.Contains(old, l) {
			msg.WriteString("\n  + " + l)
		}
	}
	t.Errorf("%s differs from what the code exports (- only in the file, + only in the code):%s\n"+
		"A removed or renamed line breaks the v1 promise: keep the old form beside the new one (docs/compatibility.md).\n"+
		"If the change is meant, rewrite the file with: %s", path, msg.String(), update)
}
