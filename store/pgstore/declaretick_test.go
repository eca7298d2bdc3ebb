package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestDeclarationTickSQL: the SQL of a new schedule's last_tick computes
// store.DeclarationTick (now() is given here as a parameter, since it
// cannot be set: the conformance suite checks real declarations).
func TestDeclarationTickSQL(t *testing.T) {
	pool := pgtest.PoolFor(t, pgtest.DSN(t))
	sec := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	q := "SELECT " + strings.ReplaceAll(pgstore.DeclarationTickSQL, "now()", "$1::timestamptz")
	for _, now := range []time.Time{sec, sec.Add(time.Microsecond), sec.Add(250 * time.Millisecond)} {
		var got time.Time
		if err := pool.QueryRow(ctxT(t), q, now).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := store.DeclarationTick(now); !got.Equal(want) {
			t.Errorf("last_tick of a declaration at %s = %s, want %s", now, got, want)
		}
	}
}
