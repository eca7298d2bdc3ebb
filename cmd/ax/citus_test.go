package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestMigrateUpCitus: migrate up --citus distributes a schema of the
// Citus coordinator, plain migrate up then refuses it with a hint, and
// --citus is refused on a PostgreSQL without Citus and on SQLite.
func TestMigrateUpCitus(t *testing.T) {
	noEnv := storeOpener{getenv: func(string) string { return "" }}
	pool, schema := citustest.Schema(t)
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
		{"ShardsWithoutCitus", citus, []string{"migrate", "up", "--shards", "4"}, exitUsage, "", "--shards needs --citus"},
		{"Distribute", citus, []string{"migrate", "up", "--citus", "--shards", "4"}, exitOK, "schema " + schema + " migrated from version 0 to", ""},
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
	var slots int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.citus_slots`).Scan(&slots))
	require.Equal(t, 4, slots, "--shards 4")
}

// TestCLIOnCitus: the operator's commands work on a distributed schema,
// through the coordinator: they list, count, show, cancel, retry and
// delete jobs of every shard, and list nodes and kinds.
func TestCLIOnCitus(t *testing.T) {
	noEnv := storeOpener{getenv: func(string) string { return "" }}
	pool, schema := citustest.Schema(t)
	ctx := t.Context()
	require.NoError(t, pgstore.MigrateCitus(ctx, pool, pgstore.WithSchema(schema), pgstore.WithCitusShards(4)))
	st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	defer st.Close()
	var params []store.InsertParams
	for i := range 12 {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		params = append(params, store.InsertParams{ID: id, Kind: "mail", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)),
			Priority: store.PriorityNormal, MaxAttempts: 3, Delay: time.Hour})
	}
	_, err = st.Insert(ctx, params)
	require.NoError(t, err)
	cli := inProcess(noEnv, "--database-url", citustest.URL(), "--schema", schema)
	for _, s := range []struct {
		name string
		args []string
		out  string
	}{
		{"Count", []string{"jobs", "count", "--kind", "mail"}, "12"},
		{"List", []string{"jobs", "list", "--kind", "mail"}, params[0].ID.String()},
		{"Show", []string{"jobs", "show", params[5].ID.String()}, "mail"},
		{"Cancel", []string{"jobs", "cancel", "--kind", "mail", "--state", "scheduled", "--yes"}, "12"},
		{"Retry", []string{"jobs", "retry", "--kind", "mail", "--state", "cancelled", "--yes"}, "12"},
		{"CancelAgain", []string{"jobs", "cancel", "--kind", "mail", "--yes"}, "12"},
		{"Delete", []string{"jobs", "delete", "--kind", "mail", "--state", "cancelled", "--yes"}, "12"},
		{"CountAfter", []string{"jobs", "count", "--kind", "mail"}, "0"},
		{"Nodes", []string{"nodes"}, ""},
		{"Kinds", []string{"kinds", "list"}, ""},
		{"Stats", []string{"stats"}, ""},
	} {
		t.Run(s.name, func(t *testing.T) {
			out, errOut, code := cli(t, s.args...)
			require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Contains(t, out, s.out)
		})
	}
}
