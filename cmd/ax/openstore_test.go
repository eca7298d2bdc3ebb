package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestSQLitePath: which --database-url values name a SQLite file.
func TestSQLitePath(t *testing.T) {
	for _, tc := range []struct {
		url, path string
		ok        bool
	}{
		{"sqlite:jobs.db", "jobs.db", true},
		{"sqlite:///var/lib/app/jobs", "/var/lib/app/jobs", true},
		{"sqlite://rel/jobs", "rel/jobs", true},
		{"./jobs.db", "./jobs.db", true},
		{"/data/ax.SQLITE3", "/data/ax.SQLITE3", true},
		{"jobs.sqlite", "jobs.sqlite", true},
		{"postgres://u@h/db", "", false},
		{"postgresql://h/db?sslmode=disable", "", false},
		{"host=localhost dbname=app.db", "", false},
		{"", "", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			path, ok := sqlitePath(tc.url)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.path, path)
		})
	}
}

// TestSQLiteFile: the binary's opener runs the commands on a SQLite file:
// migrate creates it, jobs list reads it; while a service holds it,
// listings still work and changes fail, saying so. On the old code every
// command asked for PostgreSQL.
func TestSQLiteFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "app.db")
	open := storeOpener{getenv: func(string) string { return "" }}
	ax := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"--database-url", "sqlite:" + path}, args...), strings.NewReader(""), &out, &errOut, open)
		return code, out.String(), errOut.String()
	}

	code, _, errOut := ax("jobs", "list")
	require.Equal(t, exitError, code, "no file: not created by a listing")
	require.Contains(t, errOut, "no such file")

	code, out, errOut := ax("migrate", "status", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.JSONEq(t, `{"database": 0, "binary": `+itoa(sqlitestore.SchemaVersion())+`, "status": "behind"}`, out)
	code, _, errOut = ax("migrate", "up")
	require.Equal(t, exitOK, code, errOut)

	st, err := sqlitestore.Open(ctx, path) // the service
	require.NoError(t, err)
	p := store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "email.send", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}
	_, err = st.Insert(ctx, []store.InsertParams{p})
	require.NoError(t, err)

	code, out, errOut = ax("jobs", "list", "--json")
	require.Equal(t, exitOK, code, errOut)
	var page struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, p.ID.String(), page.Jobs[0].ID)

	code, _, errOut = ax("jobs", "cancel", p.ID.String(), "--yes")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "read-only")
	_, _, err = openSQLite(ctx, path, true) // ax serve: refused at its start
	require.ErrorIs(t, err, sqlitestore.ErrLocked)
	require.ErrorContains(t, err, "axhttp")

	require.NoError(t, st.Close()) // the service stopped: ax holds the file
	code, _, errOut = ax("jobs", "cancel", p.ID.String(), "--yes")
	require.Equal(t, exitOK, code, errOut)
	st, err = sqlitestore.Open(ctx, path)
	require.NoError(t, err, "ax released the file")
	defer st.Close()
	rec, err := st.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, rec.State)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSQLiteNoSchema: a SQLite file without AX's tables (another
// application's, or an empty one) says so and what to do, instead of
// naming schema version 0.
func TestSQLiteNoSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600)) // an empty file is an empty SQLite database
	_, _, err := openSQLite(t.Context(), path, false)
	require.ErrorIs(t, err, errNoSchema)
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--database-url", "sqlite:" + path, "stats"}, strings.NewReader(""), &out, &errOut,
		storeOpener{getenv: func(string) string { return "" }})
	require.Equal(t, exitError, code)
	require.Equal(t, "ax stats: "+path+": no AX schema here: wrong database, or run `ax migrate up`\n", errOut.String())
}
