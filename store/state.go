package store

import "fmt"

// State is where a job is in its life. Every transition below is made by one
// atomic store operation guarded by the state it leaves (and, for running
// jobs, by the lease token), so no two processes can both make it.
//
//	scheduled ──claim──▶ running ──ok──▶ succeeded
//	    ▲                   │ error, attempts left ──▶ retrying (run_at = now + backoff) ──claim──▶ running
//	    │                   │ error, none left / permanent ──▶ dead  (kept, inspectable, RunNow retries it)
//	    │                   │ lease expired (owner died) ──▶ retrying or dead (RescueExpired)
//	    │                   │ snooze(d) or hand-back ──▶ scheduled (run_at = now + d; attempt not counted)
//	    └── resume ── paused ◀── pause ── scheduled | retrying
//	running ──pause──▶ pause requested; the attempt runs to its end ──▶ paused (instead of retrying or scheduled)
//	scheduled | retrying | paused ──cancel──▶ cancelled
//	running ──cancel──▶ cancel requested; the owner's heartbeat cancels the handler ──▶ cancelled
//
// Succeeded, dead and cancelled are final: nothing but RunNow (for dead and
// cancelled) moves a job out of them, and the pruner eventually deletes them.
type State string

const (
	// StateScheduled: waiting for its run_at. Entered by insert, snooze,
	// hand-back (a stopping host releasing a running job), resume and RunNow.
	// Left by claim (when due), pause and cancel. Not final.
	StateScheduled State = "scheduled"

	// StateRunning: claimed by exactly one owner, which holds its lease
	// token until lease_expires_at (extended by heartbeats). Entered only by
	// claim. Left by Finish with the matching token, or by RescueExpired once
	// the lease has expired. Not final.
	StateRunning State = "running"

	// StateRetrying: the last attempt failed and attempts remain; run_at is
	// the time of the next attempt (now + backoff). Entered by Finish and
	// RescueExpired. Left like StateScheduled. Not final.
	StateRetrying State = "retrying"

	// StatePaused: held by an operator; never claimed. Entered by pause from
	// scheduled or retrying, and from running when a paused job's attempt
	// ends with a retry, snooze or hand-back (or its lease is rescued with
	// attempts left): a pause waits for the running attempt, never
	// interrupts it. Left by resume (to scheduled, keeping run_at), RunNow
	// (to scheduled, run_at = now) and cancel. Not final.
	StatePaused State = "paused"

	// StateSucceeded: the handler returned nil. Entered by Finish. Final.
	StateSucceeded State = "succeeded"

	// StateDead: the dead letter state. The last attempt failed, the error
	// was permanent, or the lease of the last attempt expired. Entered by
	// Finish and RescueExpired. Final, except that RunNow schedules it
	// again, its attempts numbered on (see OpRunNow).
	StateDead State = "dead"

	// StateCancelled: cancelled by a user before it could finish. Entered by
	// cancel (from scheduled, retrying, paused) and by Finish for a running
	// job whose cancel was requested. Final, except for RunNow.
	StateCancelled State = "cancelled"
)

// States lists every state, live ones first.
var States = []State{
	StateScheduled, StateRetrying, StateRunning, StatePaused,
	StateSucceeded, StateDead, StateCancelled,
}

// Final reports whether s is a final state (succeeded, dead or cancelled).
func (s State) Final() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// Claimable reports whether a job in state s is claimed once its run_at has
// passed (scheduled or retrying).
func (s State) Claimable() bool {
	return s == StateScheduled || s == StateRetrying
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// ParseState returns the State named by s, or an error wrapping
// ErrInvalidParams when s names none.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("%w: unknown state %q", ErrInvalidParams, s)
	}
	return st, nil
}
