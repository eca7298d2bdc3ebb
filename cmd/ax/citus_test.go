package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/internal/pgtest"
)

// TestMigrateUpCitus: migrate up --citus distributes a schema of the
// Citus coordinator, plain migrate up then refuses it with a hint, and
// --citus is refused on a PostgreSQL without Citus and on SQLite.
func TestMigrateUpCitus(t *testing.T) {
	noEnv := storeOpener{getenv: func(string) string { return "" }}
	_, schema := citustest.Schema(t)
	citus := inProcess(noEnv, "--database-url", citustest.URL(), "--schema", schema)
	plain := inProcess(noEnv, "--database-url", pgtest.DSN(t))
	sqlite := inProcess(noEnv, "--database-url", "sqlite:"+t.TempDir()+"/app.db")
	for _, s := range []struct {
		name     string
		cli      cliFunc
		args     []string
		code     int
		out, err string
	}{
		{"Distribute", citus, []string{"migrate", "up", "--citus"}, exitOK, "schema " + schema + " migrated from version 0 to", ""},
		{"Again", citus, []string{"migrate", "up", "--citus"}, exitOK, "already at version", ""},
		{"PlainRefused", citus, []string{"migrate", "up"}, exitError, "", "is distributed by Citus: run `ax migrate up --citus`"},
		{"Status", citus, []string{"migrate", "status"}, exitOK, "up to date", ""},
		{"NoCitus", plain, []string{"migrate", "up", "--citus"}, exitError, "", "no Citus"},
		{"SQLite", sqlite, []string{"migrate", "up", "--citus"}, exitUsage, "", "--citus needs the URL of a Citus coordinator"},
	} {
		t.Run(s.name, func(t *testing.T) {
			out, errOut, code := s.cli(t, s.args...)
			require.Equal(t, s.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.True(t, strings.Contains(out, s.out), "stdout %q lacks %q", out, s.out)
			require.True(t, strings.Contains(errOut, s.err), "stderr %q lacks %q", errOut, s.err)
		})
	}
}
