package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// prefixJobs are the jobs of the ID prefix scenario: IDs at both ends of
// the order, two sharing 8 digits, and more than maxCandidates sharing 6.
var prefixJobs = func() []uuid.UUID {
	ids := []uuid.UUID{
		uuid.MustParse("00000000-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000002"),
		uuid.MustParse("0a0b0c0e-0000-7000-8000-000000000001"),
		uuid.MustParse("ffffffff-ffff-7fff-bfff-ffffffffffff"),
	}
	for i := range maxCandidates + 2 {
		ids = append(ids, uuid.MustParse(fmt.Sprintf("0e0e0e%02d-0000-7000-8000-000000000000", i)))
	}
	return ids
}()

// insertPrefixJobs inserts prefixJobs, due in a long time.
func insertPrefixJobs(t *testing.T, st store.Store) {
	t.Helper()
	for _, id := range prefixJobs {
		_, err := st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "report.build", Payload: []byte(`{}`),
			Priority: store.PriorityNormal, MaxAttempts: 1, Delay: 1 << 40}})
		require.NoError(t, err)
	}
}

// idPrefixScenario runs jobs show and a bulk command with whole IDs and
// prefixes through cli, on a store holding prefixJobs.
func idPrefixScenario(t *testing.T, cli cliFunc) {
	cases := []struct {
		name   string
		args   []string
		code   int
		out    string // substring of stdout
		errOut string // substring of stderr
	}{
		{"Whole", []string{"jobs", "show", prefixJobs[1].String()}, exitOK, "ID:            0a0b0c0d-0000-7000-8000-000000000001", ""},
		{"Prefix", []string{"jobs", "show", "0a0b0c0e"}, exitOK, "ID:            0a0b0c0e-0000-7000-8000-000000000001", ""},
		{"PrefixWithDashes", []string{"jobs", "show", "0a0b0c0d-0000-7000-8000-00000000000"}, exitAmbiguous, "", "start with 0a0b0c0d-0000-7000-8000-00000000000"},
		{"PrefixCopiedFromDashboard", []string{"jobs", "show", "0A0B0C0E…"}, exitOK, "0a0b0c0e-0000-7000-8000-000000000001", ""},
		{"Zeros", []string{"jobs", "show", "0000"}, exitOK, "00000000-0000-7000-8000-000000000001", ""},
		{"Top", []string{"jobs", "show", "ffff"}, exitOK, "ffffffff-ffff-7fff-bfff-ffffffffffff", ""},
		{"Ambiguous", []string{"jobs", "show", "0a0b"}, exitAmbiguous, "",
			"ax jobs show: ambiguous job ID prefix: the IDs of 3 jobs start with 0a0b (give more digits):\n" +
				"  0a0b0c0d-0000-7000-8000-000000000001  report.build  scheduled\n" +
				"  0a0b0c0d-0000-7000-8000-000000000002  report.build  scheduled\n" +
				"  0a0b0c0e-0000-7000-8000-000000000001  report.build  scheduled\n"},
		{"AmbiguousMany", []string{"jobs", "show", "0e0e"}, exitAmbiguous, "", "the IDs of more than 10 jobs start with 0e0e"},
		{"None", []string{"jobs", "show", "0b0b"}, exitNotFound, "", "no job's ID starts with 0b0b"},
		{"TooShort", []string{"jobs", "show", "0a0"}, exitUsage, "", `"0a0" is not a job ID, nor its first 4 or more hexadecimal digits`},
		{"NotHex", []string{"jobs", "show", "0a0x"}, exitUsage, "", "not a job ID"},
		{"BulkAmbiguous", []string{"jobs", "cancel", "0a0b", "--yes"}, exitAmbiguous, "", "the IDs of 3 jobs"},
		{"BulkPrefixes", []string{"jobs", "cancel", "0a0b0c0e", "0000", prefixJobs[4].String(), "--yes", "--json"}, exitOK,
			`"changed": 3`, ""},
		{"AfterCancel", []string{"jobs", "show", "0a0b0c0e"}, exitOK, "cancelled", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := cli(t, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Contains(t, out, tc.out)
			require.Contains(t, errOut, tc.errOut)
		})
	}
}

// exitAmbiguous is the exit code of an ambiguous prefix: a usage error.
const exitAmbiguous = exitUsage

// inProcess runs the CLI in this process with open and the global
// arguments pre.
func inProcess(open opener, pre ...string) cliFunc {
	return func(t *testing.T, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append(append([]string(nil), pre...), args...), strings.NewReader(""), &out, &errOut, open)
		return out.String(), errOut.String(), code
	}
}

// TestIDPrefix runs the ID prefix scenario on every store: the prefix is
// one range of the ID order in each.
func TestIDPrefix(t *testing.T) {
	noEnv := storeOpener{getenv: func(string) string { return "" }}
	stores := []struct {
		name string
		cli  func(t *testing.T) cliFunc // a store holding prefixJobs
	}{
		{"memstore", func(t *testing.T) cliFunc {
			st := memstore.New()
			insertPrefixJobs(t, st)
			return inProcess(memOpener{st: st})
		}},
		{"sqlite", func(t *testing.T) cliFunc {
			path := filepath.Join(t.TempDir(), "app.db")
			st, err := sqlitestore.Open(t.Context(), path)
			require.NoError(t, err)
			insertPrefixJobs(t, st)
			require.NoError(t, st.Close()) // the CLI holds the file to change jobs
			return inProcess(noEnv, "--database-url", "sqlite:"+path)
		}},
		{"postgres", func(t *testing.T) cliFunc {
			dsn := pgtest.DSN(t)
			st, err := pgstore.New(t.Context(), pgtest.PoolFor(t, dsn))
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			insertPrefixJobs(t, st)
			return inProcess(noEnv, "--database-url", dsn)
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			idPrefixScenario(t, s.cli(t))
		})
	}
}
