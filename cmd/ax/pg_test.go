package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// buildCLI builds this command into the test's temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ax")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// binaryCLI runs the built binary as a subprocess, with DATABASE_URL
// taken out of its environment and env added.
func binaryCLI(bin string, env ...string) cliFunc {
	return func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "DATABASE_URL=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return out.String(), errOut.String(), 0
		case errors.As(err, &exit):
			return out.String(), errOut.String(), exit.ExitCode()
		}
		t.Fatalf("run %s: %v", bin, err)
		return "", "", -1
	}
}

// TestPostgresMigrate drives the binary against an empty database:
// status before and after migrate up, the database URL from the flag and
// from DATABASE_URL, a second schema, commands on an unmigrated schema and
// on an unreachable server.
func TestPostgresMigrate(t *testing.T) {
	dsn := pgtest.EmptyDSN(t)
	bin := buildCLI(t)
	cli := binaryCLI(bin)
	version := pgstore.SchemaVersion()
	steps := []struct {
		name string
		cli  cliFunc
		args []string
		code int
		out  string // substring of stdout, or the JSON document
		err  string // substring of stderr
	}{
		{"NoDatabase", cli, []string{"migrate", "status"}, exitUsage, "", "no database: give --database-url or set DATABASE_URL"},
		{"StatusBefore", cli, []string{"migrate", "status", "--database-url", dsn}, exitOK,
			fmt.Sprintf("schema ax: database at version 0, this binary at version %d: behind (run: ax migrate up)", version), ""},
		{"CommandsNeedTheSchema", cli, []string{"stats", "--database-url", dsn}, exitError, "",
			"ax stats: schema \"ax\": no AX schema here: wrong database, or run `ax migrate up`\n"},
		{"UpFromEnv", binaryCLI(bin, "DATABASE_URL="+dsn), []string{"migrate", "up"}, exitOK,
			fmt.Sprintf("schema ax migrated from version 0 to %d", version), ""},
		{"UpAgainJSON", cli, []string{"--database-url", dsn, "migrate", "up", "--json"}, exitOK,
			fmt.Sprintf(`{"database":%d,"binary":%d,"status":"up-to-date","before":%d}`, version, version, version), ""},
		{"StatusJSON", cli, []string{"migrate", "status", "--json", "--database-url", dsn}, exitOK,
			fmt.Sprintf(`{"database":%d,"binary":%d,"status":"up-to-date"}`, version, version), ""},
		{"OtherSchema", cli, []string{"migrate", "status", "--schema", "billing", "--database-url", dsn}, exitOK,
			"schema billing: database at version 0", ""},
		{"BadSchemaName", cli, []string{"migrate", "up", "--schema", "Bad-Name", "--database-url", dsn}, exitUsage, "", "schema name"},
		{"StatsAfter", cli, []string{"stats", "--database-url", dsn}, exitOK, "(no jobs)", ""},
		{"NodesAfter", cli, []string{"nodes", "--database-url", dsn}, exitOK, "no maintenance leader right now", ""}, // pgstore reads the leader (store.LeaderReader): none runs here
		{"Unreachable", cli, []string{"stats", "--timeout", "5s", "--database-url", "postgres://postgres@127.0.0.1:1/none?sslmode=disable"}, exitError, "", "connect to PostgreSQL"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, errOut, code := s.cli(t, s.args...)
			require.Equal(t, s.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			if strings.HasPrefix(s.out, "{") {
				require.JSONEq(t, s.out, out)
			} else {
				require.Contains(t, out, s.out)
			}
			require.Contains(t, errOut, s.err)
		})
	}
}

// TestPostgresOperate runs the operator scenario (operateScenario) with
// the built binary against PostgreSQL: jobs that die, listed with
// filters, retried in bulk, succeeding; a kind paused while its jobs are
// due and running.
func TestPostgresOperate(t *testing.T) {
	dsn := pgtest.DSN(t)
	pool := pgtest.PoolFor(t, dsn)
	st, err := pgstore.New(t.Context(), pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.Empty(t, operatorInterfaces(st), "pgstore lacks operator interfaces")
	bin := buildCLI(t)
	cli := binaryCLI(bin)
	operateScenario(t, st, func(t *testing.T, args ...string) (string, string, int) {
		return cli(t, append(args, "--database-url", dsn)...)
	})
	// A listing read back from the database is in brief: the start of the
	// payload's JSON text and its size (jobs show prints it raw).
	out := mustCLI(t, cli, "jobs", "list", "--kind", "e2e.flaky", "--limit", "1", "--json", "--database-url", dsn)
	var l map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	j := l["jobs"].([]any)[0].(map[string]any)
	require.Nil(t, j["payload"])
	require.Equal(t, `{"n":1}`, j["brief"].(map[string]any)["payload"])
	require.Equal(t, float64(7), j["brief"].(map[string]any)["payload_size"])
	out = mustCLI(t, cli, "jobs", "show", j["id"].(string), "--json", "--database-url", dsn)
	var whole map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &whole))
	require.Equal(t, map[string]any{"n": float64(1)}, whole["payload"], "jobs show keeps the payload raw")
}
