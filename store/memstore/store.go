package memstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Compile-time checks of the interfaces Store implements.
var (
	_ store.Store    = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
	_ store.Pruner   = (*Store)(nil)
	_ store.Lister   = (*Store)(nil)
	_ store.Counter  = (*Store)(nil)
	_ store.Closer   = (*Store)(nil)
)

// Store is an in-memory store.Store. It also implements store.Notifier,
// store.Pruner, store.Lister, store.Counter, store.Closer, the periodic
// and cluster interfaces (store.PeriodicStore, store.Leaser,
// store.NodeRegistry) and the operator's (store.JobInspector,
// store.BulkController, store.KindPauser, store.PeriodicController,
// store.LeaderReader, store.DueInspector).
//
// All methods are safe for concurrent use; each one is atomic: it takes the
// store's lock once, and either fully applies or changes nothing. Records it
// returns are copies the caller may keep and modify. A method called with a
// context that is already done returns the context's error and changes
// nothing (an operation never blocks on anything but the lock, so the
// context is not checked after that). After Close every method returns an
// error wrapping store.ErrClosed.
//
// Create a Store with New; the zero value is not usable.
type Store struct {
	now func() time.Time

	subs subscribers

	mu     sync.Mutex
	closed bool
	jobs   map[uuid.UUID]*job
	kinds  map[string]*kindIndex
	// unique maps a unique key to the job holding it: the one job with
	// that key that is not cancelled.
	unique   map[string]*job
	leases   jobHeap // running jobs by lease expiry
	finished jobHeap // final jobs by finish time
	ids      idIndex // every job's ID, for List
	// periodic holds periodic schedules' state (periodic.go).
	periodic periodicStates
	cluster  cluster // leadership leases and nodes (cluster.go)
	// nonces maps remembered request nonces to their expiry (nonce.go).
	nonces map[string]time.Time
	// batches holds batches by ID, and followUpsOf the IDs of the jobs
	// each job's end inserted (followup.go, batch.go).
	batches     map[uuid.UUID]*batch
	followUpsOf map[uuid.UUID][]uuid.UUID
	// kindStates holds the kinds an operator paused or resumed
	// (kindpause.go).
	kindStates map[string]*store.KindState
}

// job is the store's own copy of a job with its index positions.
type job struct {
	rec  store.JobRecord
	kind *kindIndex
	pos  [numSlots]int
}

// kindIndex holds what the store keeps per job kind.
type kindIndex struct {
	name string
	// due holds the claimable jobs of each priority (index priority-1).
	due [len(priorityLevels)]jobHeap
	// counts holds the number of jobs in each state (index stateIndex).
	counts [numStates]int64
}

var priorityLevels = [...]int{store.PriorityHigh, store.PriorityNormal, store.PriorityLow}

const numStates = 7

// stateIndex maps a state to its position in store.States.
func stateIndex(s store.State) int {
	switch s {
	case store.StateScheduled:
		return 0
	case store.StateRetrying:
		return 1
	case store.StateRunning:
		return 2
	case store.StatePaused:
		return 3
	case store.StateSucceeded:
		return 4
	case store.StateDead:
		return 5
	default:
		return 6 // cancelled
	}
}

// New returns an empty Store. Without options its clock is time.Now.
func New(opts ...Option) *Store {
	s := &Store{
		now:         time.Now,
		jobs:        make(map[uuid.UUID]*job),
		kinds:       make(map[string]*kindIndex),
		unique:      make(map[string]*job),
		leases:      jobHeap{slot: leaseSlot},
		finished:    jobHeap{slot: finishedSlot},
		batches:     make(map[uuid.UUID]*batch),
		followUpsOf: make(map[uuid.UUID][]uuid.UUID),
	}
	for _, o := range opts {
		o.apply(s)
	}
	return s
}

// clock reads the store's clock at the precision the store keeps.
func (s *Store) clock() time.Time { return stamp(s.now()) }

// stamp truncates t to the microsecond, the precision of PostgreSQL's
// timestamptz, dropping any monotonic clock reading.
func stamp(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// lock takes the store's lock unless the store is closed or ctx is done; on
// error the lock is not held.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

func (s *Store) kind(name string) *kindIndex {
	k := s.kinds[name]
	if k == nil {
		k = &kindIndex{name: name}
		for i := range k.due {
			k.due[i].slot = dueSlot
		}
		s.kinds[name] = k
	}
	return k
}

// index adds j to the counters and to the heap its state calls for. Every
// transition is unindex, change the record, index.
func (s *Store) index(j *job) {
	k := j.kind
	k.counts[stateIndex(j.rec.State)]++
	switch {
	case j.rec.State.Claimable():
		k.due[j.rec.Priority-1].push(j)
	case j.rec.State == store.StateRunning:
		s.leases.push(j)
	case j.rec.State.Final():
		s.finished.push(j)
	}
}

// unindex reverses index.
func (s *Store) unindex(j *job) {
	k := j.kind
	k.counts[stateIndex(j.rec.State)]--
	k.due[j.rec.Priority-1].remove(j)
	s.leases.remove(j)
	s.finished.remove(j)
}

// leaveRunning clears what only a running job carries: its lease and the
// cancel and pause requests, which were about this attempt. The owner is
// kept, naming the node that last held the job.
func leaveRunning(r *store.JobRecord) {
	r.LeaseToken = uuid.Nil
	r.LeaseExpiresAt = time.Time{}
	r.CancelRequested = false
	r.PauseRequested = false
}

// releaseKey frees j's unique key if j holds it (j is being cancelled or
// deleted).
func (s *Store) releaseKey(j *job) {
	if j.rec.UniqueKey != "" && s.unique[j.rec.UniqueKey] == j {
		delete(s.unique, j.rec.UniqueKey)
	}
}

// copyRecord returns a deep copy of r.
func copyRecord(r *store.JobRecord) *store.JobRecord {
	c := *r
	c.Payload = bytes.Clone(r.Payload)
	c.Metadata = maps.Clone(r.Metadata)
	c.Errors = slices.Clone(r.Errors)
	c.Result = bytes.Clone(r.Result)
	c.FollowUps = cloneFollowUps(r.FollowUps)
	return &c
}

// Get returns a copy of the job with the given ID, or an error wrapping
// store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil, fmt.Errorf("get job %s: %w", id, store.ErrNotFound)
	}
	return copyRecord(&j.rec), nil
}

// Now returns the store's clock (time.Now unless WithClock replaced it),
// truncated to the microsecond.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, fmt.Errorf("read store clock: %w", err)
	}
	defer s.mu.Unlock()
	return s.clock(), nil
}

// Close closes the store and drops its jobs and subscriptions. Later calls
// to other methods return errors wrapping store.ErrClosed. Close is safe to
// call more than once and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.jobs, s.kinds, s.unique, s.kindStates, s.batches, s.followUpsOf = nil, nil, nil, nil, nil, nil
	s.leases.reset()
	s.finished.reset()
	s.ids = idIndex{}
	s.subs.clear()
	return nil
}

// zeroTime is the zero time.Time, which the record uses for "not set".
var zeroTime time.Time
