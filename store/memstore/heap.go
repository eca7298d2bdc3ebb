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
	// seqSlot: live jobs of one kind and sequence key, ordered by
	// scheduled time.
	seqSlot

	numSlots
)

// jobHeap is a min-heap of jobs ordered by the time its slot selects, then
// by ID. It records each job's position in job.pos[slot], so removing or
// re-ordering any job is O(log n). It implements heap.Interface; use its
// push, remove, fix and top helpers.
//
// Entries carry their sort key, so comparisons read the heap's own array
// rather than chasing a pointer to each job.
type jobHeap struct {
	slot    heapSlot
	entries []heapEntry
}

type heapEntry struct {
	at     int64  // the slot's time, in Unix microseconds (times are kept at µs)
	hi, lo uint64 // the job ID, big-endian halves: byte order
	j      *job
}

func (h *jobHeap) entry(j *job) heapEntry {
	var t time.Time
	switch h.slot {
	case dueSlot:
		t = j.rec.RunAt
	case leaseSlot:
		t = j.rec.LeaseExpiresAt
	case seqSlot:
		t = j.rec.ScheduledAt
	default:
		t = j.rec.FinishedAt
	}
	hi, lo := idHalves(j.rec.ID)
	return heapEntry{at: t.UnixMicro(), hi: hi, lo: lo, j: j}
}

func (h *jobHeap) Len() int { return len(h.entries) }

func (h *jobHeap) Less(a, b int) bool {
	ea, eb := &h.entries[a], &h.entries[b]
	if ea.at != eb.at {
		return ea.at < eb.at
	}
	if ea.hi != eb.hi {
		return ea.hi < eb.hi
	}
	return ea.lo < eb.lo
}

func (h *jobHeap) Swap(a, b int) {
	h.entries[a], h.entries[b] = h.entries[b], h.entries[a]
	h.entries[a].j.pos[h.slot] = a
	h.entries[b].j.pos[h.slot] = b
}

// Push is for container/heap only.
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.pos[h.slot] = len(h.entries)
	h.entries = append(h.entries, h.entry(j))
}

// Pop is for container/heap only.
func (h *jobHeap) Pop() any {
	n := len(h.entries) - 1
	j := h.entries[n].j
	h.entries[n] = heapEntry{}
	h.entries = h.entries[:n]
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
		h.entries[i] = h.entry(j)
		heap.Fix(h, i)
	}
}

// top returns the smallest job, or nil when the heap is empty.
func (h *jobHeap) top() *job {
	if len(h.entries) == 0 {
		return nil
	}
	return h.entries[0].j
}

// reset empties the heap, keeping its slot.
func (h *jobHeap) reset() { h.entries = nil }

func idHalves(id uuid.UUID) (hi, lo uint64) {
	return binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
}

// idLess orders UUIDs by their bytes, as bytes.Compare and PostgreSQL's uuid
// type do; for UUIDv7 that is creation order.
func idLess(a, b uuid.UUID) bool {
	ah, al := idHalves(a)
	bh, bl := idHalves(b)
	if ah != bh {
		return ah < bh
	}
	return al < bl
}
