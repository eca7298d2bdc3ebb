package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

var nullJSON = []byte("null")

// Insert inserts jobs atomically, as store.Store.Insert documents. Every row
// is checked first, and one bad row fails the whole call with an error
// wrapping store.ErrInvalidParams: one that InsertParams.Validate refuses
// (texts, sizes, times and limits, so that memstore accepts only what every
// Store can keep), or an ID that is already taken (by a job in the store or
// an earlier inserted row of the call). A nil payload is stored as JSON
// null; any other is kept byte for byte. Payload and metadata are copied. A
// row whose unique key is held in its scope (store.UniqueScope) by another
// job (in the store or earlier in the call) is not inserted: its result
// carries the holder's ID and Duplicate = true. A Period window is that of
// the store's now at the call; the holders are kept in a map that every
// transition updates, so the check costs O(1) a row. A row with a zero RunAt is due Delay after the
// store's now; that run_at is also its ScheduledAt, which nothing changes
// afterwards. Subscribers are notified once per kind with the earliest
// run_at inserted.
//
// Flow control (store.FlowStore): each row gets the partition key its
// kind's stored PartitionSource derives (store.PartitionKeyOf; a key that
// cannot be kept fails the call with store.ErrInvalidParams), and the
// call fails with a *store.PendingLimitError, inserting nothing, when it
// would take a kind's pending jobs past its MaxPending or all pending jobs
// past a row's PendingLimit (every row of the call counts, duplicates
// too). The pending counts are counters the indexes keep.
func (s *Store) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	return s.insert(ctx, params, true)
}

// insert is Insert; bounded applies the pending bounds (a periodic tick,
// which the store inserts itself, is never refused).
func (s *Store) insert(ctx context.Context, params []store.InsertParams, bounded bool) ([]store.InsertResult, error) {
	fresh, err := prepare(params)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	var ns notes
	results, err := s.insertLocked(params, fresh, uuid.Nil, &ns, bounded)
	s.takeWakes(&ns)
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	s.subs.deliver(ns.list)
	return results, nil
}

// scopeOf returns the scope a job records: p's, or the zero scope for a
// job without a key.
func scopeOf(p *store.InsertParams) store.UniqueScope {
	if p.UniqueKey == "" {
		return store.UniqueScope{}
	}
	return p.Unique
}

// prepare checks every row and copies it into a job, outside the lock.
// Each job is its own allocation, so a pruned job frees its memory
// whatever happens to the rest of its batch.
func prepare(params []store.InsertParams) ([]*job, error) {
	fresh := make([]*job, len(params))
	for i := range params {
		p := &params[i]
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		payload := nullJSON
		if p.Payload != nil { // Validate refused an empty one: not JSON
			payload = bytes.Clone(p.Payload)
		}
		var md map[string]string
		if len(p.Metadata) > 0 {
			md = maps.Clone(p.Metadata)
		}
		fresh[i] = newJob(store.JobRecord{
			ID:          p.ID,
			Kind:        p.Kind,
			Payload:     payload,
			Metadata:    md,
			State:       store.StateScheduled,
			Priority:    p.Priority,
			MaxAttempts: p.MaxAttempts,
			UniqueKey:   p.UniqueKey,
			Unique:      scopeOf(p),
			FollowUps:   cloneFollowUps(p.FollowUps),
			SequenceKey: p.SequenceKey,
		})
	}
	return fresh, nil
}

// insertLocked inserts prepared rows (children of batch, when not zero),
// deciding every row before writing any so that a taken ID changes
// nothing, and adds notifications to ns. Called with s.mu held.
func (s *Store) insertLocked(params []store.InsertParams, fresh []*job, batch uuid.UUID, ns *notes, bounded bool) ([]store.InsertResult, error) {
	return s.insertAt(params, fresh, batch, ns, bounded, s.clock())
}

// insertAt is insertLocked at the store's time now, read by the caller.
func (s *Store) insertAt(params []store.InsertParams, fresh []*job, batch uuid.UUID, ns *notes, bounded bool, now time.Time) ([]store.InsertResult, error) {
	if bounded {
		if err := s.checkPending(params); err != nil {
			return nil, err
		}
	}
	for i, j := range fresh {
		key, err := s.partitionKey(&params[i])
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		j.rec.PartitionKey = key
	}
	// The store's now decides the Period windows of the whole call.
	results := make([]store.InsertResult, len(params))
	var batchKeys map[uniqueKey]uuid.UUID
	var batchIDs map[uuid.UUID]struct{}
	if len(params) > 1 {
		batchKeys = make(map[uniqueKey]uuid.UUID)
		batchIDs = make(map[uuid.UUID]struct{}, len(params))
	}
	for i := range params {
		p, j := &params[i], fresh[i]
		if p.UniqueKey != "" {
			j.ukey, j.keepKey = scopedKey(p, now)
			j.hasKey = true
			if h := s.holder(j.ukey); h != nil {
				results[i] = store.InsertResult{ID: h.rec.ID, Duplicate: true}
				continue
			}
			if id, ok := batchKeys[j.ukey]; ok {
				results[i] = store.InsertResult{ID: id, Duplicate: true}
				continue
			}
			if batchKeys != nil {
				batchKeys[j.ukey] = p.ID
			}
		}
		_, taken := s.jobs[p.ID]
		if _, dup := batchIDs[p.ID]; taken || dup {
			return nil, fmt.Errorf("row %d: %w: job ID %s already exists", i, store.ErrInvalidParams, p.ID)
		}
		if batchIDs != nil {
			batchIDs[p.ID] = struct{}{}
		}
		results[i] = store.InsertResult{ID: p.ID}
	}

	notify := s.subs.any()
	for i := range params {
		if results[i].Duplicate {
			continue
		}
		p, j := &params[i], fresh[i]
		j.rec.CreatedAt = now
		j.rec.Batch = batch
		j.rec.RunAt = stamp(p.RunAt)
		if p.RunAt.IsZero() {
			j.rec.RunAt = stamp(now.Add(p.Delay))
		}
		j.rec.ScheduledAt = j.rec.RunAt
		j.kind = s.kind(p.Kind)
		s.jobs[p.ID] = j
		s.ids.add(p.ID)
		s.index(j)
		if notify {
			ns.add(j.rec.Kind, j.rec.RunAt)
		}
	}
	return results, nil
}
