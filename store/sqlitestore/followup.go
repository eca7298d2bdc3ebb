package sqlitestore

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// Follow-ups, results and batches: every path that makes a job final
// (Finish, RescueExpired, a cancel through Control, Bulk or CancelBatch)
// calls finalized in its transaction, which inserts the job's follow-ups
// and moves its batch on; RunNow, which takes a job out of a final state,
// calls reopened.

// finalized runs what a job's end sets off: its follow-ups for the state
// it ended in, each a new job (fresh UUIDv7, Parent = the job, no unique
// key, due its Delay after now), and its batch's progress, inserting the
// batch's completion job when this was its last open child.
func (w *wtx) finalized(j *jobRow) error {
	r := &j.rec
	if r.SequenceKey != "" {
		w.notify(r.Kind, w.now) // the sequence's next job may start
	}
	if j.followUps != "" {
		fs, err := decodeFollowUps(j.followUps)
		if err != nil {
			return fmt.Errorf("job %s follow-ups: %w", r.ID, err)
		}
		for _, f := range fs {
			if !slices.Contains(f.On, r.State) {
				continue
			}
			p := f.Job
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			p.ID = id
			if !p.RunAt.IsZero() && p.RunAt.Before(w.now) {
				p.RunAt = w.now
			}
			if _, err := w.insertRow(&p, r.ID, uuid.Nil, true); err != nil {
				return fmt.Errorf("follow-up of job %s: %w", r.ID, err)
			}
		}
	}
	b, err := w.batchOf(j)
	if err != nil || b == nil {
		return err
	}
	s, d, c := finalCounts(r.State)
	var pending, completed, reopened int64
	if err := w.queryRow(qBatchEnd, s, d, c, r.Batch[:]).Scan(&pending, &completed, &reopened); err != nil {
		return fmt.Errorf("batch %s: %w", r.Batch, err)
	}
	if pending > 0 || completed != 0 {
		return nil
	}
	tmpl, err := decodeParams(b.template)
	if err != nil {
		return fmt.Errorf("batch %s completion: %w", r.Batch, err)
	}
	if reopened != 0 {
		// Completed before: the caller's ID names the first completion job.
		if tmpl.ID, err = uuid.NewV7(); err != nil {
			return err
		}
	}
	if _, err := w.exec(qBatchComplete, toUS(w.now), r.Batch[:]); err != nil {
		return err
	}
	if _, err := w.insertRow(tmpl, r.ID, r.Batch, true); err != nil {
		return fmt.Errorf("completion of batch %s: %w", r.Batch, err)
	}
	return nil
}

// reopened undoes finalized's batch bookkeeping for a job RunNow took out
// of the final state from: it is pending again, and a batch that had
// completed reopens, to insert its completion job again when it completes
// again.
func (w *wtx) reopened(j *jobRow, from store.State) error {
	b, err := w.batchOf(j)
	if err != nil || b == nil {
		return err
	}
	s, d, c := finalCounts(from)
	_, err = w.exec(qBatchReopen, s, d, c, j.rec.Batch[:])
	return err
}

// finalCounts returns the batch counters a final state adds to.
func finalCounts(st store.State) (succeeded, dead, cancelled int64) {
	switch st {
	case store.StateSucceeded:
		return 1, 0, 0
	case store.StateDead:
		return 0, 1, 0
	}
	return 0, 0, 1
}

// batchRef is a batch as a child's end needs it.
type batchRef struct {
	template string // the completion job, encoded
}

// batchOf returns the batch j is a child of, or nil (also for a batch's
// completion jobs).
func (w *wtx) batchOf(j *jobRow) (*batchRef, error) {
	if j.rec.Batch == uuid.Nil {
		return nil, nil
	}
	var (
		completion []byte
		tmpl       string
		completed  int64
	)
	err := w.queryRow(qBatchLoad, j.rec.Batch[:]).Scan(&completion, &tmpl, &completed)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(completion) != len(j.rec.ID) || uuid.UUID(completion) == j.rec.ID || j.rec.Parent != uuid.Nil {
		return nil, nil // a completion job (children have no parent)
	}
	return &batchRef{template: tmpl}, nil
}

// FollowUps returns the jobs whose Parent is id — its follow-ups, its Then
// jobs, and a batch completion it set off — oldest first.
func (s *Store) FollowUps(ctx context.Context, id uuid.UUID) ([]*store.JobRecord, error) {
	var out []*store.JobRecord
	err := s.read(ctx, false, func(r *rtx) error {
		var err error
		out, err = records(r.query(qFollowUps, id[:]))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("follow-ups of job %s: %w", id, err)
	}
	return out, nil
}
