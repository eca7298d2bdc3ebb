package sqlitestore_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestOpenRefuses checks the paths Open refuses and a newer schema.
func TestOpenRefuses(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "a?b.db"} {
		_, err := sqlitestore.Open(t.Context(), p)
		require.ErrorIs(t, err, store.ErrInvalidParams, "path %q", p)
	}
	path := filepath.Join(t.TempDir(), "ax.db")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec("PRAGMA user_version = 99")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = sqlitestore.Open(t.Context(), path)
	require.ErrorIs(t, err, sqlitestore.ErrSchemaTooNew)
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "other.db"))
	require.NoError(t, err, "a refused open released its lock and left nothing running")
	require.NoError(t, st.Close())
}

// TestDurable checks that jobs, their state and the periodic and cluster
// tables survive a Close and Open, and that a job left running by the
// previous Store is taken back at once.
func TestDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ax.db")
	st, err := sqlitestore.Open(t.Context(), path)
	require.NoError(t, err)
	waiting := job("k", "w", store.UniqueScope{})
	waiting.Delay = time.Hour
	running := job("k", "", store.UniqueScope{})
	running.MaxAttempts = 3
	_, err = st.Insert(t.Context(), []store.InsertParams{waiting, running})
	require.NoError(t, err)
	res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "gone", Kinds: []store.KindLimit{{Kind: "k", Limit: 5}}, Limit: 5, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	_, err = st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "p", Spec: "@daily"})
	require.NoError(t, err)
	before, err := st.Get(t.Context(), waiting.ID)
	require.NoError(t, err)
	require.NoError(t, st.Close())

	st, err = sqlitestore.Open(t.Context(), path)
	require.NoError(t, err)
	defer st.Close()
	after, err := st.Get(t.Context(), waiting.ID)
	require.NoError(t, err)
	require.Equal(t, before, after)
	_, err = st.PeriodicState(t.Context(), "p")
	require.NoError(t, err)
	rescued, err := st.RescueExpired(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []store.Rescued{{ID: running.ID, Kind: "k", Owner: "gone", Attempt: 1, State: store.StateRetrying}}, rescued,
		"the lease of a job left running by a Store that is gone expires at Open")
	dup := insertOne(t, st, job("k", "w", store.UniqueScope{}))
	require.Equal(t, store.InsertResult{ID: waiting.ID, Duplicate: true}, dup)
}

// TestInsertTx checks that jobs inserted in a caller's transaction exist
// only if it commits, together with the caller's writes.
func TestInsertTx(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	_, err := st.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, what TEXT)`)
	require.NoError(t, err)
	notified := make(chan store.Notification, 10)
	defer st.Subscribe(func(n store.Notification) { notified <- n })()

	for _, commit := range []bool{true, false} {
		tx, err := st.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, `INSERT INTO orders (what) VALUES ('book')`)
		require.NoError(t, err)
		p := job("ship", fmt.Sprintf("order-%t", commit), store.UniqueScope{})
		res, err := st.InsertTx(ctx, tx, []store.InsertParams{p})
		require.NoError(t, err)
		require.Equal(t, []store.InsertResult{{ID: p.ID}}, res)
		require.Equal(t, "ship", (<-notified).Kind)
		if commit {
			require.NoError(t, tx.Commit())
			got, err := st.Get(ctx, p.ID)
			require.NoError(t, err)
			require.Equal(t, "order-true", got.UniqueKey)
			continue
		}
		require.NoError(t, tx.Rollback())
		_, err = st.Get(ctx, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	var orders int
	require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders))
	require.Equal(t, 1, orders, "the rolled back order went with its job")
	counts, err := st.CountJobs(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.StateCount{{Kind: "ship", State: store.StateScheduled, Count: 1}}, counts)

	_, err = st.InsertTx(ctx, nil, []store.InsertParams{job("ship", "", store.UniqueScope{})})
	require.ErrorIs(t, err, store.ErrInvalidParams)
}

// TestNonces checks RememberNonce.
func TestNonces(t *testing.T) {
	clock := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := newStore(t, sqlitestore.WithClock(clock.Now))
	ctx := t.Context()
	remember := func(nonce string, ttl time.Duration) bool {
		t.Helper()
		fresh, err := st.RememberNonce(ctx, nonce, clock.Now().Add(ttl))
		require.NoError(t, err)
		return fresh
	}
	require.True(t, remember("n1", time.Minute))
	require.False(t, remember("n1", time.Minute), "seen and not expired")
	require.True(t, remember("n2", time.Minute))
	clock.Add(time.Minute)
	require.True(t, remember("n1", time.Minute), "expired: new again")
	require.False(t, remember("n1", time.Hour))
	for _, bad := range []string{"", "a\x00b", "a\xffb", strings.Repeat("n", store.MaxNonceLength+1)} {
		_, err := st.RememberNonce(ctx, bad, clock.Now().Add(time.Minute))
		require.ErrorIs(t, err, store.ErrInvalidParams, "nonce %q", bad)
	}
	_, err := st.RememberNonce(ctx, "n3", time.Time{})
	require.ErrorIs(t, err, store.ErrInvalidParams)
}

// TestClosed checks that a closed Store refuses every call.
func TestClosed(t *testing.T) {
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "ax.db"))
	require.NoError(t, err)
	require.NoError(t, st.Close())
	_, err = st.Insert(t.Context(), []store.InsertParams{job("k", "", store.UniqueScope{})})
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.Get(t.Context(), uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.Now(t.Context())
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = st.Claim(t.Context(), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "k", Limit: 1}}, Limit: 1, LeaseDuration: time.Second})
	require.ErrorIs(t, err, store.ErrClosed)
	st.Subscribe(func(store.Notification) {})() // a no-op on a closed store
}

// TestPayloadsLarge checks that the largest payload round-trips byte for
// byte, alone and twenty in one call.
func TestPayloadsLarge(t *testing.T) {
	st := newStore(t)
	big := make([]byte, store.MaxPayloadSize)
	for i := range big {
		big[i] = 'x'
	}
	big[0], big[len(big)-1] = '"', '"'
	p := job("big", "", store.UniqueScope{})
	p.Payload = big
	insertOne(t, st, p)
	res, err := st.Claim(t.Context(), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "big", Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, string(big), string(res.Jobs[0].Payload))

	// Many large rows in one call go in several statements.
	ps := make([]store.InsertParams, 20)
	for i := range ps {
		ps[i] = job("bigger", "", store.UniqueScope{})
		ps[i].Payload = big
	}
	_, err = st.Insert(t.Context(), ps)
	require.NoError(t, err)
	for _, p := range []store.InsertParams{ps[0], ps[19]} {
		got, err := st.Get(t.Context(), p.ID)
		require.NoError(t, err)
		require.Equal(t, string(big), string(got.Payload))
	}
}

// TestInsertTxOtherHandle checks InsertTx in a transaction of another
// handle on the same file.
func TestInsertTxOtherHandle(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	db, err := sql.Open("sqlite", st.Path()+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	require.NoError(t, err)
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	p := job("ship", "", store.UniqueScope{})
	_, err = st.InsertTx(ctx, tx, []store.InsertParams{p})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	got, err := st.Get(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateScheduled, got.State)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "ship", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "the job inserted through another handle is claimed")
}

// TestDeclareOnWholeSecond: a schedule declared when the store clock is
// on a whole second gets a LastTick a microsecond later, off the ticks
// (store.DeclarationTick), so it reads as never ticked.
func TestDeclareOnWholeSecond(t *testing.T) {
	clock := &manualClock{now: time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)}
	st := newStore(t, sqlitestore.WithClock(clock.Now))
	d, err := st.DeclarePeriodic(t.Context(), &store.DeclarePeriodicParams{Name: "hourly", Spec: "@hourly"})
	require.NoError(t, err)
	require.Equal(t, clock.now.Add(time.Microsecond), d.State.LastTick.UTC())
	require.False(t, store.Ticked(d.State.LastTick))
	got, err := st.PeriodicState(t.Context(), "hourly")
	require.NoError(t, err)
	require.True(t, got.LastTick.Equal(d.State.LastTick), "stored as declared: %s", got.LastTick)
}
