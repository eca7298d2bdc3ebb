package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/pgtest"
)

// TestQuickstart runs the README's first command on every store, so a
// broken quickstart fails CI. On SQLite it runs twice on one file: the
// second run finds the first run's jobs.
func TestQuickstart(t *testing.T) {
	opts := options{work: 5, workTime: 10 * time.Millisecond}
	t.Run("sqlite", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		o := opts
		o.dbPath = filepath.Join(t.TempDir(), "q.db")
		var first, second bytes.Buffer
		if err := run(t.Context(), o, &first); err != nil {
			t.Fatal(err)
		}
		if err := run(t.Context(), o, &second); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"SQLite at", "all jobs succeeded"} {
			if !strings.Contains(first.String(), want) || !strings.Contains(second.String(), want) {
				t.Fatalf("output lacks %q:\n%s\n%s", want, first.String(), second.String())
			}
		}
		if strings.Contains(first.String(), "earlier runs") {
			t.Fatalf("a fresh file reported earlier jobs:\n%s", first.String())
		}
		if !strings.Contains(second.String(), "the store holds jobs of earlier runs: 9 succeeded") {
			t.Fatalf("the second run did not find the first run's 9 jobs (4 demo jobs and 5 work jobs):\n%s", second.String())
		}
	})
	t.Run("memstore", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		o := opts
		o.mem = true
		if err := run(t.Context(), o, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Setenv("DATABASE_URL", pgtest.DSN(t))
		if err := run(t.Context(), opts, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}
