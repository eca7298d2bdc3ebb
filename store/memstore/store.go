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
// store.LeaderReader, store.DueInspector) and store.InsertClaimer.
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
	// unique maps a unique key in its scope to the job holding it (see
	// holdsKey); index and unindex keep it.
	unique   map[uniqueKey]*job
	leases   jobHeap // running jobs by lease expiry
	finished jobHeap // final jobs by finish time
	ids      idIndex // every job's ID, for List
	// periodic holds periodic schedules' state (periodic.go).
	periodic periodicStates
	cluster  cluster // leadership leases and nodes (cluster.go)
	// nonces maps remembered request nonces to their expiry (nonce.go).
	nonces map[string]time.Time
	// revoked maps revocations to their expiry (revocation.go).
	revoked map[string]time.Time
	// batches holds batches by ID, and followUpsOf the IDs of the jobs
	// each job's end inserted (followup.go, batch.go).
	batches     map[uuid.UUID]*batch
	followUpsOf map[uuid.UUID][]uuid.UUID
	// kindStates holds the kinds an operator paused or resumed
	// (kindpause.go).
	kindStates map[string]*store.KindState
	// kindDefaults holds kinds' declared job defaults (kinddefaults.go).
	kindDefaults map[string]store.KindDefaults
	// flows holds kinds' flow settings and state (flow.go); pending counts
	// the claimable jobs of every kind; wakes collects the notifications
	// flow control owes listeners (a slot freed, a sequence moved on),
	// delivered by the call that made them.
	flows    map[string]*flowState
	pending  int64
	wakes    notes
	seqWakes []*job
}

// job is the store's own copy of a job with its index positions.
type job struct {
	rec  store.JobRecord
	kind *kindIndex
	part *partIndex // while indexed
	seq  *seqIndex  // while live with a sequence key
	pos  [numSlots]int
	// ukey is the job's unique key in its scope, when hasKey; keepKey
	// says whether a succeeded or dead job still holds it (holdsKey).
	ukey    uniqueKey
	hasKey  bool
	keepKey bool
	// ended is the token of the lease whose Finish took the job out of
	// running, until the job is claimed again (rescued jobs have none), so
	// that ExtendLeases tells a lease its holder finished from one taken
	// over.
	ended uuid.UUID
}

// newJob returns an unindexed job holding rec.
func newJob(rec store.JobRecord) *job {
	j := &job{rec: rec}
	for i := range j.pos {
		j.pos[i] = -1
	}
	return j
}

// kindIndex holds what the store keeps per job kind.
type kindIndex struct {
	name string
	// parts holds the kind's claimable and running jobs by partition key;
	// partList lists the same partitions, for claims to walk.
	parts    map[string]*partIndex
	partList []*partIndex
	// seqs holds the kind's live jobs that have a sequence key, by key.
	seqs map[string]*seqIndex
	// counts holds the number of jobs in each state (index stateIndex).
	counts [numStates]int64
}

// partIndex holds one partition of a kind (jobs without a partition key
// are the partition ""): its claimable jobs of each priority (index
// priority-1) and how many of its jobs run. A job with a sequence key is
// in due only while its sequence lets it run (seqIndex).
type partIndex struct {
	key     string
	due     [len(priorityLevels)]jobHeap
	running int
	pos     int // in kindIndex.partList
}

func (p *partIndex) empty() bool {
	return p.running == 0 && p.due[0].Len() == 0 && p.due[1].Len() == 0 && p.due[2].Len() == 0
}

// seqIndex holds the live jobs of one kind and sequence key in
// (ScheduledAt, ID) order, how many run, and the one it put in its
// partition's due heap: the first, when it is claimable and none runs.
type seqIndex struct {
	key     string
	jobs    jobHeap
	running int
	inDue   *job
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
		unique:      make(map[uniqueKey]*job),
		leases:      jobHeap{slot: leaseSlot},
		finished:    jobHeap{slot: finishedSlot},
		batches:     make(map[uuid.UUID]*batch),
		followUpsOf: make(map[uuid.UUID][]uuid.UUID),
		flows:       make(map[string]*flowState),
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
		k = &kindIndex{name: name, parts: make(map[string]*partIndex)}
		s.kinds[name] = k
	}
	return k
}

// part returns the kind's partition key, creating it.
func (k *kindIndex) part(key string) *partIndex {
	p := k.parts[key]
	if p == nil {
		p = &partIndex{key: key, pos: len(k.partList)}
		for i := range p.due {
			p.due[i].slot = dueSlot
		}
		k.parts[key] = p
		k.partList = append(k.partList, p)
	}
	return p
}

// dropPart forgets an empty partition.
func (k *kindIndex) dropPart(p *partIndex) {
	last := k.partList[len(k.partList)-1]
	k.partList[p.pos], last.pos = last, p.pos
	k.partList = k.partList[:len(k.partList)-1]
	delete(k.parts, p.key)
}

// seq returns the kind's sequence key, creating it.
func (k *kindIndex) seq(key string) *seqIndex {
	if k.seqs == nil {
		k.seqs = make(map[string]*seqIndex)
	}
	q := k.seqs[key]
	if q == nil {
		q = &seqIndex{key: key, jobs: jobHeap{slot: seqSlot}}
		k.seqs[key] = q
	}
	return q
}

// live reports whether a job in state st is live (not final).
func live(st store.State) bool { return !st.Final() }

// index adds j to the counters and to the heaps its state calls for. Every
// transition is unindex, change the record, index.
func (s *Store) index(j *job) {
	k := j.kind
	st := j.rec.State
	k.counts[stateIndex(st)]++
	s.takeKey(j)
	switch {
	case st.Claimable():
		s.pending++
		if j.rec.SequenceKey == "" {
			s.pushDue(k, j)
		}
	case st == store.StateRunning:
		j.part = k.part(j.rec.PartitionKey)
		j.part.running++
		s.leases.push(j)
	case st.Final():
		s.finished.push(j)
	}
	if j.rec.SequenceKey != "" && live(st) {
		q := k.seq(j.rec.SequenceKey)
		j.seq = q
		q.jobs.push(j)
		if st == store.StateRunning {
			q.running++
		}
		s.seqRefresh(k, q)
	}
}

// unindex reverses index.
func (s *Store) unindex(j *job) {
	k := j.kind
	st := j.rec.State
	k.counts[stateIndex(st)]--
	s.dropKey(j)
	switch {
	case st.Claimable():
		s.pending--
		s.popDue(k, j)
	case st == store.StateRunning:
		p := j.part
		p.running--
		j.part = nil
		if p.empty() {
			k.dropPart(p)
		}
		s.leases.remove(j)
		s.leftRunning(j)
	case st.Final():
		s.finished.remove(j)
	}
	if q := j.seq; q != nil {
		q.jobs.remove(j)
		if st == store.StateRunning {
			q.running--
		}
		j.seq = nil
		s.seqRefresh(k, q)
		if q.jobs.Len() == 0 {
			delete(k.seqs, q.key)
		}
	}
}

// pushDue puts claimable j in its partition's due heap.
func (s *Store) pushDue(k *kindIndex, j *job) {
	j.part = k.part(j.rec.PartitionKey)
	j.part.due[j.rec.Priority-1].push(j)
}

// popDue takes j out of its partition's due heap, if it is in it.
func (s *Store) popDue(k *kindIndex, j *job) {
	p := j.part
	if p == nil {
		return
	}
	p.due[j.rec.Priority-1].remove(j)
	j.part = nil
	if p.empty() {
		k.dropPart(p)
	}
}

// seqRefresh puts the first job of sequence q in its partition's due heap
// when it is claimable and none of q's jobs runs, and takes out the one
// that was there if that changed. A job put there notifies listeners.
func (s *Store) seqRefresh(k *kindIndex, q *seqIndex) {
	var want *job
	if top := q.jobs.top(); top != nil && q.running == 0 && top.rec.State.Claimable() {
		want = top
	}
	if q.inDue == want {
		return
	}
	if old := q.inDue; old != nil {
		s.popDue(k, old)
	}
	q.inDue = want
	if want != nil {
		s.pushDue(k, want)
		if s.subs.any() {
			s.seqWakes = append(s.seqWakes, want)
		}
	}
}

// leftRunning notes that j, of a kind whose flow settings hold jobs back
// until a running job ends, left running: listeners are told to claim.
func (s *Store) leftRunning(j *job) {
	if f := s.flows[j.rec.Kind]; f != nil && f.cfg.Limits() {
		s.wake(j.rec.Kind, s.clock())
	}
}

// wake adds a flow-control notification, delivered by the call in
// progress (takeWakes).
func (s *Store) wake(kind string, at time.Time) {
	if s.subs.any() {
		s.wakes.add(kind, at)
	}
}

// takeWakes moves the flow-control notifications into ns: the kinds whose
// running jobs freed a slot, and the sequences' jobs made claimable that
// still are (a claim takes a sequence's first job out and puts the next
// one in, then takes it out again when the first starts). Called with
// s.mu held, by every call that delivers notifications.
func (s *Store) takeWakes(ns *notes) {
	for _, n := range s.wakes.list {
		ns.add(n.Kind, n.RunAt)
	}
	s.wakes = notes{}
	for _, j := range s.seqWakes {
		if j.rec.State.Claimable() && j.pos[dueSlot] >= 0 {
			ns.add(j.rec.Kind, j.rec.RunAt)
		}
	}
	clear(s.seqWakes)
	s.seqWakes = s.seqWakes[:0]
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
	s.jobs, s.kinds, s.unique, s.kindStates, s.batches, s.followUpsOf, s.flows = nil, nil, nil, nil, nil, nil, nil
	s.kindDefaults = nil
	s.leases.reset()
	s.finished.reset()
	s.ids = idIndex{}
	s.subs.clear()
	return nil
}

// zeroTime is the zero time.Time, which the record uses for "not set".
var zeroTime time.Time
