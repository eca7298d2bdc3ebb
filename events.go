package ax

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// EventKind says what happened to a job, a kind or the cluster.
type EventKind int

// Event kinds. A failed attempt emits EventFailed and then EventRetried or
// EventDead.
const (
	// EventScheduled: a job was stored by Schedule, ScheduleMany or
	// ScheduleTx on this host (for ScheduleTx: inserted; it exists once the
	// transaction commits).
	EventScheduled EventKind = iota + 1
	// EventStarted: this host claimed the job and started its handler.
	EventStarted
	// EventSucceeded: the handler returned nil and the result was written.
	EventSucceeded
	// EventFailed: an attempt failed (error, panic or timeout).
	EventFailed
	// EventRetried: the failed job was rescheduled after a backoff.
	EventRetried
	// EventDead: the job failed for good (attempts used up or permanent).
	EventDead
	// EventCancelled: a running job was cancelled by a user.
	EventCancelled
	// EventSnoozed: the handler snoozed the job.
	EventSnoozed
	// EventLeaseLost: this host lost a running job's lease; its handler was
	// cancelled and its result discarded.
	EventLeaseLost
	// EventLeaderChanged: this host gained or lost the maintenance
	// leadership (Event.Leader says which).
	EventLeaderChanged
	// EventRescued: this host's rescuer took back a job whose lease had
	// expired (its owner died or stalled), one event per job, on the
	// host that rescued it, whichever host owned it. Event.Owner names
	// the owner, Event.Attempt the attempt cut short and Event.State
	// where the job went (retrying, paused, dead or cancelled).
	// Event.Metadata is nil.
	EventRescued
	// EventHandedBack: Stop ran out of time and handed this host's
	// running job back to the store (scheduled, due at once, the attempt
	// not counted), one event per job the store took back.
	EventHandedBack
	// EventBreakerOpened: a kind's circuit breaker opened (JobKind);
	// Event.Reason says why and Event.Delay is the cool-down. Emitted
	// once, by the host whose store call opened it (an outcome it wrote,
	// or its Admin opening it by hand).
	EventBreakerOpened
	// EventBreakerHalfOpen: a kind's breaker let one probe start, after
	// its cool-down; emitted by the host whose claim started it.
	EventBreakerHalfOpen
	// EventBreakerClosed: a kind's breaker closed (a probe succeeded, or
	// by hand); emitted by the host that closed it.
	EventBreakerClosed
	// EventBackpressure: a Schedule call on this host met a full queue
	// (MaxPending or Config.MaxPending), once per call whether it then
	// waited (WaitForCapacity) or failed. Event.Err is the
	// *BackpressureError; JobKind is its Kind (empty for all kinds).
	EventBackpressure
	// EventKindUnhandled: the maintenance leader found a kind whose jobs
	// have been due for Config.UnhandledKindGrace with no running node
	// handling it (JobKind; Delay is how long its oldest due job has
	// waited). Emitted by the leader only, when it first finds the kind
	// and then hourly while it lasts.
	EventKindUnhandled
	// EventKeyMissing: this host claimed a job whose sealed values it
	// cannot open (Config.Keys): their key is not in its ring, or they
	// are in an envelope format newer than this release reads. The job
	// is left for a host that can open it: snoozed for
	// Config.KeyMissingDelay (Event.Delay), the attempt not counted, and
	// EventSnoozed follows. Event.Err is the attempt's error, which wraps
	// the *SealError (ErrKeyMissing or ErrSealFormat) naming the key.
	// Seen during a rolling deploy of a new key, it ends once every host
	// has the key; seen for long, a host lacks a key it needs.
	EventKeyMissing
)

var eventNames = map[EventKind]string{
	EventScheduled: "scheduled", EventStarted: "started", EventSucceeded: "succeeded",
	EventFailed: "failed", EventRetried: "retried", EventDead: "dead",
	EventCancelled: "cancelled", EventSnoozed: "snoozed", EventLeaseLost: "lease_lost",
	EventLeaderChanged: "leader_changed", EventRescued: "rescued", EventHandedBack: "handed_back",
	EventBreakerOpened: "breaker_opened", EventBreakerHalfOpen: "breaker_half_open", EventBreakerClosed: "breaker_closed",
	EventBackpressure: "backpressure", EventKindUnhandled: "kind_unhandled", EventKeyMissing: "key_missing",
}

// String returns the event's snake_case name ("lease_lost").
func (k EventKind) String() string {
	if n, ok := eventNames[k]; ok {
		return n
	}
	return "unknown"
}

// Event is one thing that happened, delivered to Config.Observers.
type Event struct {
	Kind EventKind
	// At is the host time the event was emitted.
	At time.Time
	// Node is the emitting Scheduler's node name.
	Node string
	// JobID, JobKind, Attempt and Metadata describe the job (zero for
	// EventLeaderChanged).
	JobID    uuid.UUID
	JobKind  string
	Attempt  int
	Metadata map[string]string
	// Batch is the job's batch, if any: outcome events of a batch's
	// children tell its progress.
	Batch uuid.UUID
	// StartLag is how late the handler started (EventStarted): its start
	// on the host's clock minus the job's run_at converted to the host's
	// clock (with the store-to-host offset measured at each claim). It is
	// what a user of the job sees.
	StartLag time.Duration
	// ClaimLag is how late the job was claimed (EventStarted): the claim
	// minus run_at, both in the store's clock. StartLag minus ClaimLag is
	// the time from the claim to the handler (the claim's round trip,
	// the hand-off to a worker).
	ClaimLag time.Duration
	// Duration is the handler's run time (outcome events).
	Duration time.Duration
	// Delay is the retry backoff or snooze delay (EventRetried,
	// EventSnoozed), or the cool-down of an opened breaker
	// (EventBreakerOpened).
	Delay time.Duration
	// Err is the attempt's error (EventFailed, EventDead, EventCancelled).
	Err error
	// Leader reports, for EventLeaderChanged, whether this host is now
	// the leader.
	Leader bool
	// Owner names, for EventRescued, the node whose lease expired.
	Owner string
	// State is, for EventRescued, the state the job went to.
	State State
	// Reason says, for breaker events, what changed the breaker ("5
	// failed attempts in a row", "probe failed", "closed by hand"...).
	Reason string
}

// Observer receives events. Observe is called on one dedicated goroutine,
// never on a worker, so a slow observer cannot slow jobs down: events wait
// in a bounded buffer (Config.EventBuffer) and are dropped, and counted,
// when it is full.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

// eventBatchDelay is how long the delivery goroutine lets events gather
// after the first one arrives: observers see them at most this late, and
// the goroutine wakes at most once per delay instead of once per event,
// which is what keeps observers cheap at tens of thousands of jobs a second.
const eventBatchDelay = time.Millisecond

// events fans events out to observers off the hot path: emit appends to a
// bounded buffer under a mutex, and one goroutine delivers the buffer in
// batches. It is created by New (so Schedule before Start buffers its
// events), started by Start and stopped by Stop.
type events struct {
	observers []Observer
	capacity  int
	dropped   atomic.Int64

	mu     sync.Mutex
	queued []Event

	signal chan struct{} // capacity 1: events are waiting
	quit   chan struct{}
	done   chan struct{}
}

func newEvents(observers []Observer, buffer int) *events {
	return &events{
		observers: observers,
		capacity:  buffer,
		signal:    make(chan struct{}, 1),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// emit queues e without blocking; a full buffer drops it.
func (ev *events) emit(e Event) {
	if len(ev.observers) == 0 {
		return
	}
	ev.mu.Lock()
	if len(ev.queued) >= ev.capacity {
		ev.mu.Unlock()
		ev.dropped.Add(1)
		return
	}
	ev.queued = append(ev.queued, e)
	first := len(ev.queued) == 1
	ev.mu.Unlock()
	if first {
		select {
		case ev.signal <- struct{}{}:
		default:
		}
	}
}

// start launches the delivery goroutine; call it once.
func (ev *events) start() {
	if len(ev.observers) == 0 {
		close(ev.done)
		return
	}
	go ev.run()
}

func (ev *events) run() {
	defer close(ev.done)
	var batch []Event
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	defer gather.Stop()
	for {
		select {
		case <-ev.signal:
		case <-ev.quit:
			ev.deliver(ev.take(batch))
			return
		}
		gather.Reset(eventBatchDelay)
		select {
		case <-gather.C:
		case <-ev.quit:
			ev.deliver(ev.take(batch))
			return
		}
		batch = ev.take(batch)
		ev.deliver(batch)
	}
}

// take swaps the queue for spare (emptied) and returns what was queued.
func (ev *events) take(spare []Event) []Event {
	clear(spare)
	ev.mu.Lock()
	batch := ev.queued
	ev.queued = spare[:0]
	ev.mu.Unlock()
	return batch
}

func (ev *events) deliver(batch []Event) {
	for _, e := range batch {
		for _, o := range ev.observers {
			o.Observe(e)
		}
	}
}

// stop delivers the queued events and stops the goroutine started by
// start; call it once, after start.
func (ev *events) stop() {
	close(ev.quit)
	<-ev.done
}
