package pgstore_test

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestPayloadCompression checks migration 0013: payloads and results of
// jobs and of the history partitions that existed then are compressed
// with lz4, so a row over the TOAST threshold whose payload is sealed
// (random, incompressible) is stored without a pglz attempt, and a plain
// compressible payload still compressed. On a server without lz4 the
// migration changes nothing.
func TestPayloadCompression(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	ctx := ctxT(t)
	if err := pgstore.MigrateTo(ctx, pool, 12); err != nil {
		t.Fatal(err)
	}
	// A history partition made before 0013, as a Finish makes its day's.
	if _, err := pool.Exec(ctx, `CREATE TABLE ax.jobs_history_p20260101 (LIKE ax.jobs_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
		ALTER TABLE ax.jobs_history ATTACH PARTITION ax.jobs_history_p20260101 FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')`); err != nil {
		t.Fatal(err)
	}
	st := migrateAndOpen(t, pool)

	lz4 := true
	if _, err := pool.Exec(ctx, `CREATE TEMP TABLE lz4_probe (v text COMPRESSION lz4)`); err != nil {
		t.Logf("server without lz4 (%v): the migration must change nothing", err)
		lz4 = false
	}
	want := ""
	if lz4 {
		want = "l"
	}
	for _, table := range []string{"jobs", "jobs_history", "jobs_history_p20260101"} {
		for _, col := range []string{"payload", "result"} {
			var got string
			if err := pool.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
				WHERE attrelid = ('ax.' || $1)::regclass AND attname = $2`, table, col).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s.%s: compression %q, want %q", table, col, got, want)
			}
		}
	}

	// Rows over the threshold: a sealed-like payload of random base64,
	// and a plain one that compresses.
	random := make([]byte, 2400)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	sealed, plain := job("compress.sealed"), job("compress.plain")
	sealed.Payload = []byte(`{"ax_sealed":2,"key":"k","to":"job","box":"` + base64.StdEncoding.EncodeToString(random) + `"}`)
	plain.Payload = []byte(`{"body":"` + strings.Repeat("hello, world. ", 250) + `"}`)
	if _, err := st.Insert(ctx, []store.InsertParams{sealed, plain}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   uuid.UUID
		want string // pg_column_compression: "" stored whole
	}{
		{sealed.ID, ""},
		{plain.ID, map[bool]string{true: "lz4", false: "pglz"}[lz4]},
	} {
		var got *string
		if err := pool.QueryRow(ctx, `SELECT pg_column_compression(payload) FROM ax.jobs WHERE id = $1`, [16]byte(c.id)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if g := deref(got); g != c.want {
			t.Errorf("job %s: payload compression %q, want %q", c.id, g, c.want)
		}
		rec, err := st.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if c.id == sealed.ID && string(rec.Payload) != string(sealed.Payload) || c.id == plain.ID && string(rec.Payload) != string(plain.Payload) {
			t.Errorf("job %s: payload not read back byte for byte", c.id)
		}
	}

	// A day partition made after the migration (by the archive pass, as
	// a Finish does) compresses as jobs_history does.
	finishAs(t, st, "compress.done", []store.Outcome{store.OutcomeSucceeded}, "", store.UniqueScope{})
	archiveAll(t, st)
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	today := "jobs_history_p" + now.UTC().Format("20060102")
	for _, col := range []string{"payload", "result"} {
		var got string
		if err := pool.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
			WHERE attrelid = ('ax.' || $1)::regclass AND attname = $2`, today, col).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s.%s: compression %q, want %q", today, col, got, want)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
