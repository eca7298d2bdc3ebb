package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// TestModel runs the model-based test against pgstore: plain, and with an
// archive pass between every two steps, so that every read and change
// meets archived jobs and every restore from the history is compared with
// the model (issue 23). Both stay within a few seconds each in CI; set
// AX_MODEL_STEPS to run longer (a run must last more than the archive's
// 10 s look-back for the left-behind check to have jobs old enough).
func TestModel(t *testing.T) {
	t.Run("Plain", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
			return modelStore(t, false)
		}, storetest.ModelOptions{Seeds: 1, Steps: 200})
	})
	t.Run("ArchiveEveryStep", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
			return modelStore(t, true)
		}, storetest.ModelOptions{Seeds: 1, Steps: 200})
	})
	// Claims and outcomes committed without the flush wait behave the
	// same until the server crashes.
	t.Run("AsyncClaimsAndOutcomes", func(t *testing.T) {
		storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
			return modelStore(t, false, pgstore.WithAsyncClaimsAndOutcomes())
		}, storetest.ModelOptions{Seeds: 1, Steps: 200})
	})
}

// modelStore returns a fresh Store for the model, with its CompleteTx on
// the store's pool and, when archive is set, a drained archive pass after
// every step followed by the check that no finished job was left behind
// in the hot table.
func modelStore(t *testing.T, archive bool, opts ...pgstore.Option) *storetest.ModelStore {
	pool := pgtest.Pool(t) // strict: IDs as [16]byte (pgtest.StrictUUIDs)
	s, err := pgstore.New(context.Background(), pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ws := &restoreWatch{Store: s}
	ms := &storetest.ModelStore{Store: ws, CompleteTx: completeTx(s, pool), Check: ws.check}
	if archive {
		ms.AfterStep = func(ctx context.Context) error {
			for {
				n, err := s.Archive(ctx, 1000)
				if err != nil {
					return err
				}
				if n < 1000 {
					return nil
				}
			}
		}
		ms.Check = func(ctx context.Context) error {
			if err := ws.check(ctx); err != nil {
				return err
			}
			ids, err := s.LeftBehind(ctx)
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				return fmt.Errorf("%d finished jobs left in the hot table, finished before the archive's look-back (%s): %v",
					len(ids), s.ArchiveFrom(), ids)
			}
			return nil
		}
	}
	return ms
}

// completeTx applies an outcome with CompleteTx in a transaction of pool
// and commits or rolls it back.
func completeTx(s *pgstore.Store, pool *pgxpool.Pool) func(context.Context, store.FinishParams, bool) (bool, error) {
	return func(ctx context.Context, p store.FinishParams, commit bool) (bool, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return false, err
		}
		ok, err := s.CompleteTx(ctx, tx, p)
		if err != nil || !commit {
			return ok, errors.Join(err, tx.Rollback(ctx))
		}
		return ok, tx.Commit(ctx)
	}
}

// restoreWatch is a *pgstore.Store whose Bulk and Control are watched for
// finished jobs they bring back from the history and leave finished in
// the hot table (issue 23, defect 4: a restore of what the call does not
// change). Embedding keeps every optional interface of the Store.
type restoreWatch struct {
	*pgstore.Store
	mu  sync.Mutex
	bad []string
}

// watch runs call and records the finished jobs that were not in the hot
// table before it (they were in the history) and are there after it,
// finished.
func (w *restoreWatch) watch(ctx context.Context, what string, call func() error) error {
	before, err := w.HotIDs(ctx)
	if err != nil {
		return err
	}
	if err := call(); err != nil {
		return err
	}
	after, err := w.HotFinished(ctx)
	if err != nil {
		return err
	}
	var back []uuid.UUID
	for _, id := range after {
		if !slices.Contains(before, id) {
			back = append(back, id)
		}
	}
	if len(back) > 0 {
		w.mu.Lock()
		w.bad = append(w.bad, fmt.Sprintf("%s brought back %v from the history and left them finished in the hot table", what, back))
		w.mu.Unlock()
	}
	return nil
}

// check reports what watch recorded.
func (w *restoreWatch) check(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) == 0 {
		return nil
	}
	return errors.New(strings.Join(w.bad, "; "))
}

func (w *restoreWatch) Bulk(ctx context.Context, p *store.BulkParams) (n int, err error) {
	err = w.watch(ctx, "bulk "+p.Op.String(), func() error {
		n, err = w.Store.Bulk(ctx, p)
		return err
	})
	return n, err
}

func (w *restoreWatch) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (rec *store.JobRecord, err error) {
	werr := w.watch(ctx, op.String(), func() error {
		rec, err = w.Store.Control(ctx, id, op)
		return nil
	})
	return rec, errors.Join(err, werr)
}
