package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// citusFindSQL finds a job's shard, and whether it is in the history: a
// read of every shard (a job's ID names its shard only without a unique
// key), the one the operator's Control makes before its transaction.
const citusFindSQL = `SELECT shard, false FROM {jobs} WHERE id = $1
UNION ALL
SELECT shard, true FROM {history} WHERE id = $1
LIMIT 1`

// citusControlLockSQL locks the job $1 of the shard, whatever its state.
const citusControlLockSQL = `SELECT {cols}, lease_token FROM {jobs} WHERE {onshard}id = $1 FOR UPDATE`

// citusRestoreSQL and citusUnarchiveSQL move the job $1 of the shard back
// from the history to jobs, in two statements on the shard (Citus does
// not push a DELETE … RETURNING feeding an INSERT down to one shard).
const (
	citusRestoreSQL   = `INSERT INTO {jobs} SELECT * FROM {history} WHERE {onshard}id = $1`
	citusUnarchiveSQL = `DELETE FROM {history} WHERE {onshard}id = $1`
)

// citusHeldInHistorySQL is heldInHistorySQL for the job $1 of the shard,
// as a query: whether a job of the history holds its Period key.
const citusHeldInHistorySQL = `SELECT EXISTS (SELECT 1 FROM {jobs} j JOIN {history} h
	ON {onshard:h}h.unique_key = j.unique_key AND h.unique_period = j.unique_period AND h.unique_window = j.unique_window
	AND (CASE WHEN h.unique_global THEN '' ELSE h.kind END) = (CASE WHEN j.unique_global THEN '' ELSE j.kind END)
	AND h.state <> 'cancelled'
	WHERE {onshard:j}j.id = $1 AND j.state IN ('dead', 'cancelled') AND j.unique_key IS NOT NULL AND j.unique_period > 0)`

// Control applies op to the job as store.Store requires: it finds the
// job's shard (a read of every shard), then, in one transaction on that
// shard, locks the job, decides in Go (the rules of Store.Control) and
// writes. Run-now of a finished job in the history moves it back to jobs
// first, in the same transaction. Resume of a paused job and run-now
// notify listeners through the coordinator.
func (c *CitusStore) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if _, ok := c.s.controlRule(op); !ok {
		return nil, fmt.Errorf("pgstore: control job %s: unknown operation %s: %w", id, op, store.ErrInvalidParams)
	}
	for range maxInsertRetries {
		var (
			value     int32
			inHistory bool
		)
		err := c.s.pool.QueryRow(ctx, c.s.sql(citusFindSQL), [16]byte(id)).Scan(&value, &inHistory)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		}
		slot, ok := c.slotByValue[value]
		if !ok {
			return nil, fmt.Errorf("pgstore: %s job %s: shard %d is no slot of this store", op, id, value)
		}
		var out *store.JobRecord
		err = pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
			var err error
			out, err = c.controlOnShard(ctx, tx, slot, id, op, inHistory)
			return err
		})
		switch {
		case errors.Is(err, errJobMoved):
			continue // archived or restored meanwhile: find it again
		case isUniqueViolation(err):
			return nil, fmt.Errorf("pgstore: %s job %s: another job holds its unique key: %w", op, id, store.ErrWrongState)
		case err != nil:
			return nil, fmt.Errorf("pgstore: %s job %s: %w", op, id, err)
		}
		if out.State.Claimable() {
			for _, p := range c.placed {
				p.cursors.lower(out.Kind, out.RunAt) // claimable below the cursors: seen at once
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("pgstore: %s job %s: job kept moving", op, id)
}

// errJobMoved means the job left the table Control found it in before
// Control locked it.
var errJobMoved = errors.New("pgstore: the job moved")

// controlOnShard is Control's transaction on the job's shard.
func (c *CitusStore) controlOnShard(ctx context.Context, tx pgx.Tx, slot int, id uuid.UUID, op store.ControlOp, inHistory bool) (*store.JobRecord, error) {
	p := c.placed[slot]
	now, err := txNow(ctx, tx)
	if err != nil {
		return nil, err
	}
	if inHistory {
		if op != store.OpRunNow {
			// Only run-now changes a finished job: read it where it is.
			rows, _ := tx.Query(ctx, p.q.get, [16]byte(id))
			jobs, err := collectJobs(rows)
			if err != nil || len(jobs) == 0 {
				return nil, errors.Join(errJobMoved, err)
			}
			return c.controlVerdict(jobs[0], op)
		}
		tag, err := tx.Exec(ctx, p.sql(citusRestoreSQL), [16]byte(id))
		if err != nil {
			return nil, fmt.Errorf("restore from history: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil, errJobMoved
		}
		if _, err := tx.Exec(ctx, p.sql(citusUnarchiveSQL), [16]byte(id)); err != nil {
			return nil, fmt.Errorf("restore from history: %w", err)
		}
	}
	jobs, _, err := lockRows(mustQuery(ctx, tx, p.sql(citusControlLockSQL), [16]byte(id)))
	if err != nil {
		return nil, fmt.Errorf("lock the job: %w", err)
	}
	if len(jobs) == 0 {
		return nil, errJobMoved
	}
	j := jobs[0]
	n, change := controlChange(j, op, now)
	if !change {
		return c.controlVerdict(j, op)
	}
	if op == store.OpRunNow && j.State.Final() {
		var held bool
		if err := tx.QueryRow(ctx, p.sql(citusHeldInHistorySQL), [16]byte(id)).Scan(&held); err != nil {
			return nil, fmt.Errorf("look for the key in the history: %w", err)
		}
		if held {
			return nil, fmt.Errorf("a job in the history holds its unique key: %w", store.ErrWrongState)
		}
	}
	var w citusWrites
	if err := w.add(citusChange{j: n, keepToken: true}); err != nil {
		return nil, err
	}
	written, err := c.write(ctx, tx, slot, &w)
	if err != nil {
		return nil, err
	}
	if len(written) != 1 {
		return nil, errJobMoved
	}
	if out := written[0]; out.State.Claimable() && (op == store.OpRunNow || op == store.OpResume) {
		if err := c.notify(ctx, tx, map[string]time.Time{out.Kind: out.RunAt}); err != nil {
			return nil, err
		}
	}
	return written[0], nil
}

// controlVerdict returns j when op leaves it as it is (the op succeeds)
// and an error wrapping store.ErrWrongState otherwise.
func (c *CitusStore) controlVerdict(j *store.JobRecord, op store.ControlOp) (*store.JobRecord, error) {
	rule, _ := c.s.controlRule(op)
	if rule.noop(j) {
		return j, nil
	}
	return nil, fmt.Errorf("job in state %s: %w", j.State, store.ErrWrongState)
}

// controlChange returns the job j as op at now leaves it, and whether op
// changes it (the Go form of the cancel, pause, resume and runNow
// statements).
func controlChange(j *store.JobRecord, op store.ControlOp, now time.Time) (*store.JobRecord, bool) {
	n := *j
	switch op {
	case store.OpCancel:
		switch {
		case j.State == store.StateRunning:
			n.CancelRequested = true
		case j.State == store.StateScheduled || j.State == store.StateRetrying || j.State == store.StatePaused:
			n.State, n.FinishedAt, n.CancelRequested = store.StateCancelled, now, false
		default:
			return nil, false
		}
	case store.OpPause:
		switch {
		case j.State == store.StateRunning && !j.PauseRequested:
			n.PauseRequested = true
		case j.State.Claimable():
			n.State, n.PauseRequested = store.StatePaused, false
		default:
			return nil, false
		}
	case store.OpResume:
		switch {
		case j.State == store.StateRunning && j.PauseRequested:
			n.PauseRequested = false
		case j.State == store.StatePaused:
			n.State, n.PauseRequested = store.StateScheduled, false
		default:
			return nil, false
		}
	case store.OpRunNow:
		switch j.State {
		case store.StateScheduled, store.StateRetrying, store.StatePaused, store.StateDead, store.StateCancelled:
		default:
			return nil, false
		}
		if j.State == store.StateDead || j.State == store.StateCancelled {
			n.MaxAttempts = max(j.MaxAttempts, j.Attempt+1)
		}
		n.State, n.RunAt, n.FinishedAt, n.CancelRequested = store.StateScheduled, now, time.Time{}, false
	default:
		return nil, false
	}
	return &n, true
}
