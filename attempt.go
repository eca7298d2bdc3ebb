package ax

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// attemptState is where one attempt is in its life on this host. Each
// attempt has exactly one entry in the runtime's registry, keyed by its
// lease (job ID and lease token), from claim until its outcome is written
// or discarded:
//
//	claim ──▶ running ──handler returns──▶ queued ──Finish applied or refused──▶ (removed: written)
//	             │                            │ Finish cannot take it (invalid, or Stop's deadline)
//	             │                            ▼
//	             │                         (removed: discarded; the job is rescued when its lease expires)
//	             │ lease lost, or handed back by Stop
//	             ▼
//	           lost / released ──handler returns──▶ (removed: discarded, result ignored)
//
// The lease, not the job ID, is the key: a job whose outcome is being
// written can already have been claimed again by this host (a retry due at
// once), and the two attempts must not share an entry. The heartbeat
// extends the leases of running and queued attempts, so a job stays this
// host's until its outcome is in the store.
type attemptState int

const (
	// attemptRunning: the handler runs.
	attemptRunning attemptState = iota
	// attemptQueued: the handler returned; its outcome waits in the
	// completer.
	attemptQueued
)

// attempt is one claimed job on this host.
type attempt struct {
	job    *Job
	kind   *kindHandler
	lease  store.Lease
	cancel context.CancelCauseFunc
	extras *attemptExtras // results and follow-ups recorded by the handler
	// startAt is when the handler may start (host clock), for a job
	// claimed ahead of its run_at; zero: at once.
	startAt time.Time

	// Guarded by runtime.mu.
	state        attemptState
	lastExtended time.Time // host time the lease was last known held
	lost         bool      // the lease was lost: the result is discarded
	released     bool      // handed back (Stop, or a pause before it started): the result is discarded
	// A job taken ahead of the free slots (takeahead.go) waits for one:
	// slot is closed when it gets one (nil: it had one at launch);
	// waitsForSlot while it is in the runtime's waiting list, until
	// waitUntil (host clock), when it is handed back; noSlot once it
	// ended without one, so that its end frees none.
	slot         chan struct{}
	waitsForSlot bool
	noSlot       bool
	waitUntil    time.Time
}

// extendable reports whether the heartbeat should extend a's lease: its
// handler runs or its outcome waits to be written, and the lease is still
// this host's. Called with runtime.mu held.
func (a *attempt) extendable() bool { return !a.lost && !a.released }

// register adds a freshly claimed attempt. Called with r.mu held.
func (r *runtime) register(a *attempt) { r.attempts[a.lease] = a }

// unregister removes a's entry, written or discarded. Called with r.mu
// held.
func (r *runtime) unregister(a *attempt) {
	if r.attempts[a.lease] == a {
		delete(r.attempts, a.lease)
	}
}

// attemptsOf returns the attempts of job id on this host whose handler
// still runs. Called with r.mu held.
func (r *runtime) runningAttemptsOf(id uuid.UUID) []*attempt {
	var out []*attempt
	for l, a := range r.attempts {
		if l.ID == id && a.state == attemptRunning {
			out = append(out, a)
		}
	}
	return out
}
