package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newStore returns a Store on a fresh database, closed when t ends.
func newStore(t testing.TB, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	_, s := newPoolStore(t, opts...)
	return s
}

// newPoolStore returns a Store on a fresh database, closed when t ends,
// and the pool it runs on, for the statements a test runs beside it.
func newPoolStore(t testing.TB, opts ...pgstore.Option) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool := pgtest.Pool(t)
	s, err := pgstore.New(context.Background(), pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return pool, s
}

func job(kind string) store.InsertParams {
	return store.InsertParams{
		ID:          uuid.Must(uuid.NewV7()),
		Kind:        kind,
		Payload:     []byte(`{"n":1}`),
		Priority:    store.PriorityNormal,
		MaxAttempts: 3,
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
