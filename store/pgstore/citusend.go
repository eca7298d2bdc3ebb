package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// The Citus store changes a job's state in three steps on its shard, in
// one transaction: it locks the rows (a SELECT … FOR UPDATE naming the
// shard), computes their new columns in Go, and writes them (an UPDATE …
// FROM unnest naming the shard). pgstore's one-statement forms compute
// the columns in SQL with now() in CASEs and jsonb_build_object over
// the row's columns, which Citus refuses in a distributed UPDATE (a
// STABLE function with column references; docs/citus.md). Here every
// time is the coordinator's clock, read once per transaction.

// citusLockSQL locks the running jobs $1 of the shard, in id order: a
// probe by primary key per ID. As one scan of the shard for the IDs, a
// worker whose statistics called the shard, or its running jobs, empty
// read every running job of the shard (TestCitusPlansAreLinear).
const citusLockSQL = `SELECT l.* FROM (SELECT DISTINCT id FROM unnest($1::uuid[]) AS u(id) ORDER BY id) x
CROSS JOIN LATERAL (
	SELECT {cols}, lease_token FROM {jobs}
	WHERE {onshard}id = x.id AND (state = 'running') IS TRUE
	FOR UPDATE
) l
ORDER BY l.id`

// citusExpiredWhereSQL is the condition of a job whose lease expired
// before $1: the rescue's lock on a shard and its look for the shards
// that hold any (citusExpiredShardsSQL, with now()) share it.
const citusExpiredWhereSQL = `state = 'running' AND lease_expires_at < $1`

// citusExpiredSQL locks up to $2 running jobs of the shard whose lease
// expired before $1, oldest expiry first, skipping rows others hold.
const citusExpiredSQL = `SELECT {cols}, lease_token FROM {jobs}
WHERE {onshard}` + citusExpiredWhereSQL + `
ORDER BY lease_expires_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// citusWriteSQL writes the columns the Go code computed for each job $1.
// No function is called on a column: Citus runs it on the shard as it is.
// Every caller locked the rows earlier in its transaction
// (updateByProbeSQL): as a join of the arrays with the shard, its generic
// plan could hash the whole shard per call once the shard's statistics
// called it empty.
var citusWriteSQL = updateByProbeSQL("{onshard:j}", `unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::int[], $5::int[], $6::jsonb[], $7::int[], $8::timestamptz[],
		$9::boolean[], $10::timestamptz[], $11::boolean[], $12::boolean[], $13::timestamptz[])
		AS x(id, state, run_at, attempt, max_attempts, entry, snoozes, snoozed_at,
			keep_token, lease_expires_at, cancel_requested, pause_requested, finished_at)`, "", `
	state = x.state, run_at = x.run_at, attempt = x.attempt, max_attempts = x.max_attempts,
	errors = j.errors || x.entry, snoozes = x.snoozes, snoozed_at = x.snoozed_at,
	lease_token = CASE WHEN x.keep_token THEN j.lease_token END, lease_expires_at = x.lease_expires_at,
	cancel_requested = x.cancel_requested, pause_requested = x.pause_requested, finished_at = x.finished_at`, `
RETURNING {jcols}`)

// citusChange is the new columns of one job, computed in Go.
type citusChange struct {
	j         *store.JobRecord // the job as it will be (its columns below)
	entry     []attemptErrorJSON
	keepToken bool
}

// citusWrites gathers the changes of one shard as citusWriteSQL's arrays.
type citusWrites struct {
	ids                      [][16]byte
	states                   []string
	runAts, snoozedAts       []*time.Time
	leaseExps, finishedAts   []*time.Time
	attempts, maxes, snoozes []int32
	entries                  [][]byte
	keep, cancels, pauses    []bool
}

func (w *citusWrites) add(ch citusChange) error {
	j := ch.j
	entry := []byte("[]")
	if len(ch.entry) > 0 {
		b, err := json.Marshal(ch.entry)
		if err != nil {
			return err
		}
		entry = b
	}
	w.ids = append(w.ids, j.ID)
	w.states = append(w.states, string(j.State))
	w.runAts = append(w.runAts, &j.RunAt)
	w.attempts = append(w.attempts, int32(j.Attempt))
	w.maxes = append(w.maxes, int32(j.MaxAttempts))
	w.entries = append(w.entries, entry)
	w.snoozes = append(w.snoozes, int32(j.Snoozes))
	w.snoozedAts = append(w.snoozedAts, timeOrNil(j.SnoozedAt))
	w.keep = append(w.keep, ch.keepToken)
	w.leaseExps = append(w.leaseExps, timeOrNil(j.LeaseExpiresAt))
	w.cancels = append(w.cancels, j.CancelRequested)
	w.pauses = append(w.pauses, j.PauseRequested)
	w.finishedAts = append(w.finishedAts, timeOrNil(j.FinishedAt))
	return nil
}

// timeOrNil returns nil for the zero time (NULL), else &t.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// write runs citusWriteSQL for w on slot's shard and returns the jobs as
// written.
func (c *CitusStore) write(ctx context.Context, tx pgx.Tx, slot int, w *citusWrites) ([]*store.JobRecord, error) {
	if len(w.ids) == 0 {
		return nil, nil
	}
	p := c.placed[slot]
	rows, _ := tx.Query(ctx, p.sql(citusPrefixed(citusWriteSQL)), w.args()...)
	return collectJobs(rows)
}

// args are citusWriteSQL's arguments.
func (w *citusWrites) args() []any {
	return []any{w.ids, w.states, w.runAts, w.attempts, w.maxes, w.entries,
		w.snoozes, w.snoozedAts, w.keep, w.leaseExps, w.cancels, w.pauses, w.finishedAts}
}

// citusPrefixed substitutes {jcols}, which Store.sql leaves alone.
func citusPrefixed(sql string) string {
	return strings.ReplaceAll(sql, "{jcols}", prefixed("j"))
}

// lockRows runs a locking statement of slot's shard and returns the jobs
// with their lease tokens (whatever their state).
func lockRows(rows pgx.Rows) ([]*store.JobRecord, []uuid.UUID, error) {
	defer rows.Close()
	var (
		jobs   []*store.JobRecord
		tokens []uuid.UUID
	)
	for rows.Next() {
		var (
			js    jobScan
			token *[16]byte
		)
		if err := rows.Scan(append(js.dest(), &token)...); err != nil {
			return nil, nil, err
		}
		j, err := js.record()
		if err != nil {
			return nil, nil, err
		}
		var t uuid.UUID
		if token != nil {
			t = *token
		}
		jobs, tokens = append(jobs, j), append(tokens, t)
	}
	return jobs, tokens, rows.Err()
}

// Finish records attempt outcomes as store.Store requires, in one
// transaction of the coordinator: per shard (a lease's token names it),
// the jobs are locked, their outcomes computed (as Store.Finish's
// finishSets: cancel and pause requests win over retry, snooze and
// release) and written, each step one statement on the shard. Jobs that
// become claimable notify listeners through the coordinator. Finished
// jobs stay in jobs until Archive moves them. Results and Then jobs are
// features the Citus store does not have (it is no store.FollowUpStore):
// a row with either fails the call with ErrCitusUnsupported and
// store.ErrInvalidParams.
func (c *CitusStore) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkCitusFinishes(params); err != nil {
		return nil, err
	}
	ok := make([]bool, len(params))
	if len(params) == 0 {
		return ok, nil
	}
	err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
		return c.finishIn(ctx, tx, params, ok)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: finish: %w", invalidData(err))
	}
	return ok, nil
}

// CompleteTx records the outcome of an attempt inside the caller's
// transaction tx, a transaction of the coordinator, with Finish's steps:
// the outcome applies only if tx commits, with the caller's other writes
// (Citus commits a transaction that wrote to two nodes through its
// two-phase commit, and recovers one the coordinator did not finish).
// It reports whether the lease was still held. On error, tx is left for
// the caller to roll back.
func (c *CitusStore) CompleteTx(ctx context.Context, tx pgx.Tx, params store.FinishParams) (bool, error) {
	if err := c.check(); err != nil {
		return false, err
	}
	if tx == nil {
		return false, fmt.Errorf("pgstore: complete job %s in tx: nil transaction: %w", params.Lease.ID, store.ErrInvalidParams)
	}
	if err := checkCitusFinishes([]store.FinishParams{params}); err != nil {
		return false, err
	}
	if err := c.twoPhase(ctx, tx); err != nil {
		return false, err
	}
	ok := make([]bool, 1)
	if err := c.finishIn(ctx, tx, []store.FinishParams{params}, ok); err != nil {
		return false, fmt.Errorf("pgstore: complete job %s in tx: %w", params.Lease.ID, invalidData(err))
	}
	return ok[0], nil
}

// checkCitusFinishes validates every row, and refuses results and Then
// jobs, before anything is sent.
func checkCitusFinishes(params []store.FinishParams) error {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
		if len(params[i].Result) > 0 || len(params[i].Then) > 0 {
			return fmt.Errorf("pgstore: finish row %d: results and Then jobs: %w (%w)", i, ErrCitusUnsupported, store.ErrInvalidParams)
		}
	}
	return nil
}

// finishIn applies params in tx and sets ok[i] to whether params[i]
// applied. It takes two round trips whatever the number of shards: the
// clock and every shard's lock in one batch, then every shard's write and
// the notifications in another.
func (c *CitusStore) finishIn(ctx context.Context, tx pgx.Tx, params []store.FinishParams, ok []bool) error {
	first := map[store.Lease]int{} // a lease listed twice applies its first row
	bySlot := map[int][]uuid.UUID{}
	for i, p := range params {
		if _, seen := first[p.Lease]; seen {
			continue
		}
		first[p.Lease] = i
		if slot := tokenSlot(p.Lease.Token); slot < len(c.placed) {
			bySlot[slot] = append(bySlot[slot], p.Lease.ID)
		}
	}
	slots := sortedSlots(bySlot)
	locks := &pgx.Batch{}
	locks.Queue(`SELECT now()`)
	for _, slot := range slots {
		locks.Queue(c.placed[slot].sql(citusLockSQL), idBytes(bySlot[slot]))
	}
	br := tx.SendBatch(ctx, locks)
	var now time.Time
	if err := br.QueryRow().Scan(&now); err != nil {
		br.Close()
		return fmt.Errorf("read the clock: %w", err)
	}
	applied := map[store.Lease]bool{}
	earliest := map[string]time.Time{}
	writes := make([]citusWrites, len(slots))
	for k := range slots {
		rows, _ := br.Query()
		jobs, tokens, err := lockRows(rows)
		if err != nil {
			br.Close()
			return fmt.Errorf("lock jobs: %w", err)
		}
		for n, j := range jobs {
			i, held := first[store.Lease{ID: j.ID, Token: tokens[n]}]
			if !held {
				continue // another lease's row: stale
			}
			ch := finishChange(j, &params[i], now)
			if err := writes[k].add(ch); err != nil {
				br.Close()
				return err
			}
			applied[params[i].Lease] = true
			if ch.j.State.Claimable() {
				noteEarliest(earliest, ch.j.Kind, ch.j.RunAt)
			}
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("lock jobs: %w", err)
	}
	b := &pgx.Batch{}
	for k, slot := range slots {
		if w := &writes[k]; len(w.ids) > 0 {
			b.Queue(c.placed[slot].sql(citusPrefixed(citusWriteSQL)), w.args()...)
		}
	}
	if msgs := notifications(earliest); len(msgs) > 0 {
		b.Queue(c.s.q.notify, c.s.channel, msgs)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write outcomes: %w", err)
		}
	}
	reportApplied(ok, params, applied)
	return nil
}

// txNow reads the coordinator's clock at tx's start (now()): every time
// the transaction writes.
func txNow(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the clock: %w", err)
	}
	return now, nil
}

// sortedSlots returns the slots of m in order: transactions lock shards
// in one order.
func sortedSlots[V any](m map[int]V) []int {
	slots := make([]int, 0, len(m))
	for s := range m {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	return slots
}

// noteEarliest records t as kind's earliest run_at when it is.
func noteEarliest(earliest map[string]time.Time, kind string, t time.Time) {
	if e, seen := earliest[kind]; !seen || t.Before(e) {
		earliest[kind] = t
	}
}

// finishChange is the outcome p applied at now to the running job j: the
// Go form of finishSets.
func finishChange(j *store.JobRecord, p *store.FinishParams, now time.Time) citusChange {
	n := *j
	switch {
	case p.Outcome == store.OutcomeSucceeded:
		n.State = store.StateSucceeded
	case p.Outcome == store.OutcomeDead:
		n.State = store.StateDead
	case p.Outcome == store.OutcomeCancelled || j.CancelRequested:
		n.State = store.StateCancelled
	case j.PauseRequested:
		n.State = store.StatePaused
	case p.Outcome == store.OutcomeRetry:
		n.State = store.StateRetrying
	default:
		n.State = store.StateScheduled
	}
	if n.State == store.StateScheduled || n.State == store.StateRetrying || n.State == store.StatePaused {
		var delay time.Duration
		if p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeSnooze {
			delay = p.Delay
		}
		n.RunAt = now.Add(delay.Truncate(time.Microsecond))
	}
	if (p.Outcome == store.OutcomeSnooze || p.Outcome == store.OutcomeRelease) &&
		(n.State == store.StateScheduled || n.State == store.StatePaused) {
		n.Attempt = max(j.Attempt-1, 0)
	}
	ch := citusChange{j: &n, keepToken: true}
	if p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeDead || p.Outcome == store.OutcomeCancelled {
		ch.entry = []attemptErrorJSON{{Attempt: j.Attempt, At: now, Error: p.Error, Node: j.Owner, StartedAt: j.AttemptedAt}}
	}
	if p.Outcome == store.OutcomeSnooze {
		n.Snoozes = j.Snoozes + 1
		n.SnoozedAt = now
	}
	n.LeaseExpiresAt = time.Time{}
	n.CancelRequested, n.PauseRequested = false, false
	n.FinishedAt = time.Time{}
	if n.State.Final() {
		n.FinishedAt = now
	}
	return ch
}

// citusExpiredShardsSQL lists the shards that hold a running job whose
// lease expired: one statement over every shard. Every host rescues
// every RescueInterval, and almost always finds nothing; a transaction
// per shard (begin, now(), the lock, commit: four round trips) cost each
// host of a 32-shard cluster 128 round trips a second for nothing, 128 ms
// of every second with the coordinator 1 ms away, and more than the
// interval from 8 ms away (TestCitusRescueVisitsOnlyShardsWithExpiredLeases).
var citusExpiredShardsSQL = `SELECT DISTINCT shard FROM {jobs} WHERE ` +
	strings.ReplaceAll(citusExpiredWhereSQL, "$1", "now()")

// RescueExpired takes back expired leases as store.Store requires: it
// finds the shards that hold expired leases (citusExpiredShardsSQL), then
// goes through them until limit jobs are rescued. Per shard, one
// transaction locks the expired jobs (SKIP LOCKED, so every host may
// rescue at once), computes their ends (rescueStateSQL's rules) and
// writes them, each one statement on the shard. A lease that expires
// after the look is left to the next rescue.
func (c *CitusStore) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("pgstore: rescue: limit %d < 1: %w", limit, store.ErrInvalidParams)
	}
	slots, err := c.slotsWhere(ctx, citusExpiredShardsSQL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: rescue expired leases: find their shards: %w", err)
	}
	var out []store.Rescued
	for _, slot := range slots {
		if len(out) >= limit {
			break
		}
		err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
			now, err := txNow(ctx, tx)
			if err != nil {
				return err
			}
			jobs, _, err := lockRows(mustQuery(ctx, tx, c.placed[slot].sql(citusExpiredSQL), now, limit-len(out)))
			if err != nil {
				return fmt.Errorf("lock expired jobs: %w", err)
			}
			var (
				w        citusWrites
				rescued  []store.Rescued
				earliest = map[string]time.Time{}
			)
			for _, j := range jobs {
				ch := rescueChange(j, now)
				if err := w.add(ch); err != nil {
					return err
				}
				rescued = append(rescued, store.Rescued{ID: j.ID, Kind: j.Kind, Owner: j.Owner, Attempt: j.Attempt, State: ch.j.State})
				if ch.j.State.Claimable() {
					noteEarliest(earliest, j.Kind, ch.j.RunAt)
				}
			}
			if _, err := c.write(ctx, tx, slot, &w); err != nil {
				return err
			}
			if err := c.notify(ctx, tx, earliest); err != nil {
				return err
			}
			out = append(out, rescued...)
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("pgstore: rescue expired leases: %w", err)
		}
	}
	return out, nil
}

// rescueChange is the end of the expired running job j at now: the Go
// form of the rescue statement.
func rescueChange(j *store.JobRecord, now time.Time) citusChange {
	n := *j
	switch {
	case j.CancelRequested:
		n.State = store.StateCancelled
	case j.Attempt >= j.MaxAttempts:
		n.State = store.StateDead
	case j.PauseRequested:
		n.State = store.StatePaused
	default:
		n.State = store.StateRetrying
	}
	n.FinishedAt = now
	if n.State == store.StateRetrying || n.State == store.StatePaused {
		n.RunAt = now
		n.FinishedAt = time.Time{}
	}
	n.LeaseExpiresAt = time.Time{}
	n.CancelRequested, n.PauseRequested = false, false
	return citusChange{j: &n, keepToken: false, entry: []attemptErrorJSON{{Attempt: j.Attempt, At: now,
		Error: "lease expired (owner " + j.Owner + " stopped extending it)", Node: j.Owner, StartedAt: j.AttemptedAt}}}
}
