package sqlitestore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// ExtendLeases sets the expiry of every lease still held (job running under
// that token) to the store's now + params.Duration, in one transaction. A
// lease is reported in Lost when its job is not found, not running, or runs
// under another token; held leases whose job has a cancel requested are
// reported in CancelRequested. A lost lease whose job left running through
// a Finish with that very lease is reported in Finished too. A lease past
// its expiry is still held until RescueExpired takes it back. A nil params
// or a Duration <= 0 fails with an error wrapping store.ErrInvalidParams.
// One statement extends every held lease, each found through the ID index;
// a second one, run only when some are lost, reads which of those ended
// under their own token.
func (s *Store) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if params == nil {
		return nil, fmt.Errorf("extend leases: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	res := &store.ExtendResult{}
	if len(params.Leases) == 0 {
		return res, s.usableErr(ctx, "extend leases")
	}
	pairs := make([][2]string, len(params.Leases))
	for i, l := range params.Leases {
		pairs[i] = [2]string{hex.EncodeToString(l.ID[:]), hex.EncodeToString(l.Token[:])}
	}
	list, err := json.Marshal(pairs)
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	err = s.write(ctx, func(w *wtx) error {
		*res = store.ExtendResult{}
		rows, err := w.query(qExtend, toUS(w.now.Add(params.Duration)), string(list))
		if err != nil {
			return err
		}
		defer rows.Close()
		held := make(map[store.Lease]bool, len(params.Leases))
		for rows.Next() {
			var id, token []byte
			var cancel int64
			if err := rows.Scan(&id, &token, &cancel); err != nil {
				return err
			}
			l := store.Lease{ID: uuid.UUID(id), Token: uuid.UUID(token)}
			held[l] = cancel != 0
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, l := range params.Leases {
			cancel, ok := held[l]
			switch {
			case !ok:
				res.Lost = append(res.Lost, l)
			case cancel:
				res.CancelRequested = append(res.CancelRequested, l)
			}
		}
		return w.finishedLeases(res)
	})
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	return res, nil
}

// finishedLeases fills res.Finished with the leases of res.Lost whose job
// left running under that very token (a finish keeps it).
func (w *wtx) finishedLeases(res *store.ExtendResult) error {
	if len(res.Lost) == 0 {
		return nil
	}
	pairs := make([][2]string, len(res.Lost))
	for i, l := range res.Lost {
		pairs[i] = [2]string{hex.EncodeToString(l.ID[:]), hex.EncodeToString(l.Token[:])}
	}
	list, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	rows, err := w.query(qExtendEnded, string(list))
	if err != nil {
		return err
	}
	defer rows.Close()
	ended := make(map[store.Lease]bool, len(res.Lost))
	for rows.Next() {
		var id, token []byte
		if err := rows.Scan(&id, &token); err != nil {
			return err
		}
		ended[store.Lease{ID: uuid.UUID(id), Token: uuid.UUID(token)}] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, l := range res.Lost {
		if ended[l] {
			res.Finished = append(res.Finished, l)
		}
	}
	return nil
}

// Finish records attempt outcomes in one transaction, as store.Store.Finish
// documents. Every row is checked with FinishParams.Validate first; one bad
// row fails the whole call with an error wrapping store.ErrInvalidParams and
// nothing is applied. ok[i] is false, and nothing changed for that row, when
// params[i].Lease is no longer held (a lease listed twice is applied once,
// for its first row). Applied rows leave running (lease and requests
// cleared, Owner kept) for:
//
//   - OutcomeSucceeded: succeeded, FinishedAt = now.
//   - OutcomeRetry: retrying, run_at = now + Delay.
//   - OutcomeDead: dead, FinishedAt = now.
//   - OutcomeSnooze: scheduled, run_at = now + Delay, Attempt - 1.
//   - OutcomeRelease: scheduled, run_at = now, Attempt - 1.
//   - OutcomeCancelled: cancelled, FinishedAt = now.
//
// Retry, snooze and release of a job whose cancel was requested become
// cancelled (attempt kept); otherwise, for a job whose pause was requested,
// they become paused with the run_at and attempt the outcome sets. Retry,
// dead and cancelled outcomes append AttemptError{Attempt, now, Error, Owner, AttemptedAt} to
// the job's errors. A Result is recorded whatever the outcome; a success
// inserts its Then jobs; a final state inserts the job's follow-ups and
// moves its batch on. Each row costs a few indexed statements.
func (s *Store) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("finish jobs: row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(params))
	if len(params) == 0 {
		return ok, s.usableErr(ctx, "finish jobs")
	}
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.finishAll(params, nil)
		if err == nil {
			copy(ok, res)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return ok, nil
}

// finish applies one outcome to j, which runs under p's lease, and sets
// off what it inserts; the caller writes j's row (saveEnded).
func (w *wtx) finish(j *jobRow, p *store.FinishParams, breakers *[]store.BreakerTransition) error {
	r := &j.rec
	out := p.Outcome
	if err := w.observeBreakers(j, out, breakers); err != nil {
		return err
	}
	if err := w.leftRunning(j); err != nil {
		return err
	}
	switch out {
	case store.OutcomeRetry, store.OutcomeDead, store.OutcomeCancelled:
		if err := j.appendError(w.now, p.Error); err != nil {
			return err
		}
	}
	if out == store.OutcomeSnooze {
		r.Snoozes, r.SnoozedAt = r.Snoozes+1, w.now
	}
	reschedules := out == store.OutcomeRetry || out == store.OutcomeSnooze || out == store.OutcomeRelease
	if r.CancelRequested && reschedules {
		out = store.OutcomeCancelled
	}
	paused := r.PauseRequested && reschedules
	j.leaveRunning()
	switch out {
	case store.OutcomeSucceeded:
		r.State, r.FinishedAt = store.StateSucceeded, w.now
	case store.OutcomeRetry:
		r.State, r.RunAt = store.StateRetrying, w.now.Add(p.Delay)
	case store.OutcomeDead:
		r.State, r.FinishedAt = store.StateDead, w.now
	case store.OutcomeSnooze:
		r.State, r.RunAt = store.StateScheduled, w.now.Add(p.Delay)
		r.Attempt = max(r.Attempt-1, 0)
	case store.OutcomeRelease:
		r.State, r.RunAt = store.StateScheduled, w.now
		r.Attempt = max(r.Attempt-1, 0)
	case store.OutcomeCancelled:
		r.State, r.FinishedAt = store.StateCancelled, w.now
	}
	r.RunAt = fromUS(r.RunAt.UnixMicro())
	if paused && !r.State.Final() {
		// The outcome set run_at and attempt; the pause holds the job
		// there instead of letting it be claimed.
		r.State = store.StatePaused
	}
	if r.State.Claimable() {
		w.notify(r.Kind, r.RunAt)
	}
	if r.State == store.StateSucceeded {
		for i := range p.Then {
			if _, err := w.insertRow(&p.Then[i], r.ID, [16]byte{}, true); err != nil {
				return fmt.Errorf("then %d: %w", i, err)
			}
		}
	}
	if r.State.Final() {
		if err := w.finalized(j); err != nil {
			return err
		}
	}
	return nil
}
