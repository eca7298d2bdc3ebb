package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// Compile-time checks of the follow-up abilities.
var (
	_ store.FollowUpStore = (*Store)(nil)
	_ store.BatchStore    = (*Store)(nil)
)

// Follow-ups, results and batches: every path that makes a job final
// (Finish, RescueExpired, a cancel through Control or Bulk, CancelBatch)
// calls finalized under the store's lock, which inserts the job's
// follow-ups and moves its batch on; the paths that take a job out of a
// final state (RunNow) call reopened.

// newJobLocked builds a job from p (validated) with its own ID and indexes
// it, as Insert does for a row without a unique key. Called with s.mu held.
func (s *Store) newJobLocked(p *store.InsertParams, now time.Time, parent, batch uuid.UUID, ns *notes) *job {
	payload := nullJSON
	if p.Payload != nil {
		payload = bytes.Clone(p.Payload)
	}
	var md map[string]string
	if len(p.Metadata) > 0 {
		md = maps.Clone(p.Metadata)
	}
	// A key that cannot be kept leaves the job without one: the end of
	// its parent cannot be refused.
	partition, _ := s.partitionKey(p)
	j := newJob(store.JobRecord{
		ID: p.ID, Kind: p.Kind, Payload: payload, Metadata: md, State: store.StateScheduled,
		Priority: p.Priority, MaxAttempts: p.MaxAttempts, CreatedAt: now,
		FollowUps: cloneFollowUps(p.FollowUps), Parent: parent, Batch: batch,
		SequenceKey: p.SequenceKey, PartitionKey: partition,
	})
	j.rec.RunAt = stamp(p.RunAt)
	if p.RunAt.IsZero() {
		j.rec.RunAt = stamp(now.Add(p.Delay))
	}
	j.rec.ScheduledAt = j.rec.RunAt
	j.kind = s.kind(p.Kind)
	s.jobs[j.rec.ID] = j
	s.ids.add(j.rec.ID)
	s.index(j)
	if parent != uuid.Nil {
		s.followUpsOf[parent] = append(s.followUpsOf[parent], j.rec.ID)
	}
	if ns != nil && s.subs.any() {
		ns.add(j.rec.Kind, j.rec.RunAt)
	}
	return j
}

// cloneFollowUps deep-copies follow-up templates.
func cloneFollowUps(fs []store.FollowUp) []store.FollowUp {
	if len(fs) == 0 {
		return nil
	}
	out := make([]store.FollowUp, len(fs))
	for i, f := range fs {
		out[i] = store.FollowUp{On: slices.Clone(f.On), Job: f.Job}
		out[i].Job.Payload = bytes.Clone(f.Job.Payload)
		out[i].Job.Metadata = maps.Clone(f.Job.Metadata)
	}
	return out
}

// finalized runs what a job's end sets off: its follow-ups for the state
// it ended in, each a new job (fresh UUIDv7, Parent = the job, due its
// Delay after now), and its batch's progress. Called with s.mu held, after
// j's state became final.
func (s *Store) finalized(j *job, now time.Time, ns *notes) {
	for _, f := range j.rec.FollowUps {
		if !slices.Contains(f.On, j.rec.State) {
			continue
		}
		p := f.Job
		p.ID = uuid.Must(uuid.NewV7())
		p.UniqueKey = ""
		if !p.RunAt.IsZero() && p.RunAt.Before(now) {
			p.RunAt = now
		}
		s.newJobLocked(&p, now, j.rec.ID, uuid.Nil, ns)
	}
	if b := s.batchOf(j); b != nil {
		b.children[j.rec.ID] = j.rec.State
		b.pending--
		if b.pending == 0 && !b.completed {
			b.completed, b.completedAt = true, now
			p := b.completion
			if b.reopened {
				p.ID = uuid.Must(uuid.NewV7()) // the caller's ID names the first
			}
			s.newJobLocked(&p, now, j.rec.ID, b.id, ns)
		}
	}
}

// reopened undoes finalized's batch bookkeeping for a job RunNow took out
// of a final state: it is pending again, and a batch that had completed
// reopens, to insert its completion job again when it completes again.
// Called with s.mu held.
func (s *Store) reopened(j *job) {
	if b := s.batchOf(j); b != nil {
		b.children[j.rec.ID] = j.rec.State
		b.pending++
		if b.completed {
			b.completed, b.completedAt, b.reopened = false, time.Time{}, true
		}
	}
}

// batchOf returns the batch j is a child of, or nil (also for a batch's
// completion jobs).
func (s *Store) batchOf(j *job) *batch {
	if j.rec.Batch == uuid.Nil {
		return nil
	}
	b := s.batches[j.rec.Batch]
	if b == nil {
		return nil
	}
	if _, child := b.children[j.rec.ID]; !child {
		return nil
	}
	return b
}

// finishExtras applies a Finish row's result and, for a success, inserts
// its Then jobs. Called with s.mu held, after the outcome was applied.
func (s *Store) finishExtras(j *job, p *store.FinishParams, now time.Time, ns *notes) {
	if p.Result != nil {
		j.rec.Result = bytes.Clone(p.Result)
	}
	if j.rec.State != store.StateSucceeded {
		return
	}
	for i := range p.Then {
		t := p.Then[i]
		if s.jobs[t.ID] != nil {
			continue // inserted already: an ID is one job
		}
		t.UniqueKey = ""
		s.newJobLocked(&t, now, j.rec.ID, uuid.Nil, ns)
	}
}

// FollowUps returns copies of the jobs whose Parent is id — its follow-ups,
// its Then jobs, and a batch completion it set off — oldest first.
func (s *Store) FollowUps(ctx context.Context, id uuid.UUID) ([]*store.JobRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("follow-ups of job %s: %w", id, err)
	}
	defer s.mu.Unlock()
	var out []*store.JobRecord
	for _, cid := range s.followUpsOf[id] {
		if c := s.jobs[cid]; c != nil {
			out = append(out, copyRecord(&c.rec))
		}
	}
	return out, nil
}
