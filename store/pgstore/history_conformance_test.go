package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// TestConformanceArchived runs the storetest suite on a Store that moves
// every finished job it may move to jobs_history before each read or
// change, so that the suite's finished jobs are read, listed, counted,
// retried, deleted and pruned from the history rather than from jobs.
// Under -race it skips: CI runs it plainly, and TestConformance drives
// the same Go code under the race detector (the two differ in the rows
// the statements read); it was 78 s of the race run's pgstore.
func TestConformanceArchived(t *testing.T) {
	t.Parallel()
	if raceflag.Enabled {
		t.Skip("runs without -race (go test ./store/pgstore); TestConformance covers the Go code under it")
	}
	storetest.Run(t, conformanceStores(t, func(t *testing.T, s *pgstore.Store) store.Store { return archivingStore{Store: s, t: t} }))
}

// archivingStore is a *pgstore.Store whose reads and operator changes
// archive first. Embedding keeps every optional interface of the Store.
type archivingStore struct {
	*pgstore.Store
	t *testing.T
}

// archive moves every movable finished job to the history.
func (s archivingStore) archive() {
	for {
		n, err := s.Store.Archive(context.Background(), 1000)
		if errors.Is(err, store.ErrClosed) {
			return
		}
		if err != nil {
			s.t.Errorf("archive: %v", err)
			return
		}
		if n < 1000 {
			return
		}
	}
}

func (s archivingStore) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	s.archive()
	return s.Store.Get(ctx, id)
}

func (s archivingStore) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	s.archive()
	return s.Store.Insert(ctx, params)
}

func (s archivingStore) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	s.archive()
	return s.Store.Control(ctx, id, op)
}

func (s archivingStore) Bulk(ctx context.Context, params *store.BulkParams) (int, error) {
	s.archive()
	return s.Store.Bulk(ctx, params)
}

func (s archivingStore) ListJobs(ctx context.Context, params *store.ListJobsParams) (*store.JobPage, error) {
	s.archive()
	return s.Store.ListJobs(ctx, params)
}

func (s archivingStore) CountMatching(ctx context.Context, f *store.JobFilter) (int64, error) {
	s.archive()
	return s.Store.CountMatching(ctx, f)
}

func (s archivingStore) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	s.archive()
	return s.Store.CountJobs(ctx)
}

func (s archivingStore) List(ctx context.Context, params *store.ListParams) ([]*store.JobRecord, error) {
	s.archive()
	return s.Store.List(ctx, params)
}

func (s archivingStore) Prune(ctx context.Context, params *store.PruneParams) (int, error) {
	s.archive()
	return s.Store.Prune(ctx, params)
}

func (s archivingStore) FollowUps(ctx context.Context, id uuid.UUID) ([]*store.JobRecord, error) {
	s.archive()
	return s.Store.FollowUps(ctx, id)
}

func (s archivingStore) Batch(ctx context.Context, id uuid.UUID) (*store.BatchRecord, error) {
	s.archive()
	return s.Store.Batch(ctx, id)
}

func (s archivingStore) BatchChildren(ctx context.Context, id, after uuid.UUID, limit int) ([]*store.JobRecord, error) {
	s.archive()
	return s.Store.BatchChildren(ctx, id, after, limit)
}

func (s archivingStore) CancelBatch(ctx context.Context, id uuid.UUID) (int, error) {
	s.archive()
	return s.Store.CancelBatch(ctx, id)
}
