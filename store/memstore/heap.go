package memstore

import (
	"container/heap"
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// heapSlot names one of the heaps a job can sit in. A job is in at most one
// of them at a time (its state decides which), but each keeps its own
// position field so the invariant is checked rather than assumed.
type heapSlot int

const (
	// dueSlot: claimable jobs (scheduled, retrying) of one kind and
	// priority, ordered by run_at.
	dueSlot heapSlot = iota
	// leaseSlot: running jobs, ordered by lease expiry.
	leaseSlot
	// finishedSlot: final jobs, ordered by finish time.
	finishedSlot

	numSlots
)

// jobHeap is a min-heap of jobs ordered by the time its slot selects, then
// by ID. It records each job's position in job.pos[slot], so removing or
// re-ordering any job is O(log n). It implements heap.Interface; use its
// push, remove, fix and top helpers.
type jobHeap struct {
	slot heapSlot
	jobs []*job
}

func (h *jobHeap) key(j *job) time.Time {
	switch h.slot {
	case dueSlot:
		return j.rec.RunAt
	case leaseSlot:
		return j.rec.LeaseExpiresAt
	default:
		return j.rec.FinishedAt
	}
}

func (h *jobHeap) Len() int { return len(h.jobs) }

func (h *jobHeap) Less(a, b int) bool {
	ja, jb := h.jobs[a], h.jobs[b]
	ka, kb := h.key(ja), h.key(jb)
	if !ka.Equal(kb) {
		return ka.Before(kb)
	}
	return idLess(ja.rec.ID, jb.rec.ID)
}

func (h *jobHeap) Swap(a, b int) {
	h.jobs[a], h.jobs[b] = h.jobs[b], h.jobs[a]
	h.jobs[a].pos[h.slot] = a
	h.jobs[b].pos[h.slot] = b
}

// Push is for container/heap only.
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.pos[h.slot] = len(h.jobs)
	h.jobs = append(h.jobs, j)
}

// Pop is for container/heap only.
func (h *jobHeap) Pop() any {
	n := len(h.jobs) - 1
	j := h.jobs[n]
	h.jobs[n] = nil
	h.jobs = h.jobs[:n]
	j.pos[h.slot] = -1
	return j
}

func (h *jobHeap) push(j *job) { heap.Push(h, j) }

// remove takes j out of the heap if it is in it.
func (h *jobHeap) remove(j *job) {
	if i := j.pos[h.slot]; i >= 0 {
		heap.Remove(h, i)
	}
}

// fix restores the order after j's key changed.
func (h *jobHeap) fix(j *job) {
	if i := j.pos[h.slot]; i >= 0 {
		heap.Fix(h, i)
	}
}

// top returns the smallest job, or nil when the heap is empty.
func (h *jobHeap) top() *job {
	if len(h.jobs) == 0 {
		return nil
	}
	return h.jobs[0]
}

// idLess orders UUIDs by their bytes, as bytes.Compare and PostgreSQL's uuid
// type do; for UUIDv7 that is creation order.
func idLess(a, b uuid.UUID) bool {
	ah, bh := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	if ah != bh {
		return ah < bh
	}
	return binary.BigEndian.Uint64(a[8:]) < binary.BigEndian.Uint64(b[8:])
}
