package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.BulkController = (*Store)(nil)

// bulkTarget is a state a bulk operation applies to, with the extra
// condition a row of that state must meet ("" for none).
type bulkTarget struct {
	state store.State
	cond  string
}

// bulkTargets is, per operation, the states of the rows it applies to,
// each with the extra condition a row of that state must meet ("" for
// none). It mirrors the guards of Control's statements (see control.go):
// a job Bulk selects is one Control would change.
var bulkTargets = map[store.BulkOp][]bulkTarget{
	// Scheduled and retrying jobs already due have nothing to make due.
	store.BulkRunNow: {
		{store.StateScheduled, "run_at > now()"}, {store.StateRetrying, "run_at > now()"},
		{store.StatePaused, ""}, {store.StateDead, ""}, {store.StateCancelled, ""},
	},
	// A running job already asked to stop is left alone, so that
	// repeated calls drain.
	store.BulkCancel: {
		{store.StateScheduled, ""}, {store.StateRetrying, ""}, {store.StatePaused, ""},
		{store.StateRunning, "NOT cancel_requested"},
	},
	store.BulkDelete: {{store.StateSucceeded, ""}, {store.StateDead, ""}, {store.StateCancelled, ""}},
}

// bulkTargetSQL returns the term selecting the rows op applies to among
// those in states (all states when empty). States are literals, one
// equality per state, so that a filter on one state (dead jobs to retry,
// say) makes a plain equality the planner can walk an index with in ID
// order, reading no more rows than it locks.
func bulkTargetSQL(op store.BulkOp, states []store.State) string {
	var terms []string
	for _, t := range bulkTargets[op] {
		if len(states) > 0 && !slices.Contains(states, t.state) {
			continue
		}
		term := "state = " + stateLiteral(t.state)
		if t.cond != "" {
			term += " AND " + t.cond
		}
		terms = append(terms, term)
	}
	if len(terms) == 0 {
		return "false"
	}
	return "(" + strings.Join(terms, ") OR (") + ")"
}

// bulkApplySQL is, per operation but run-now, the change applied to the
// locked rows whose IDs are $1, as Control's statement for one job makes
// it (a job's end inserts its follow-ups through the jobs table's
// triggers, whichever statement ends it).
var bulkApplySQL = map[store.BulkOp]string{
	store.BulkCancel: `WITH changed AS (
	UPDATE {jobs} SET
		state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
		cancel_requested = (state = 'running'),
		finished_at = CASE WHEN state = 'running' THEN finished_at ELSE now() END
	WHERE id = ANY($1::uuid[])
	RETURNING id
)
SELECT count(*) FROM changed`,

	store.BulkDelete: `WITH changed AS (DELETE FROM {jobs} WHERE id = ANY($1::uuid[]) RETURNING id)
SELECT count(*) FROM changed`,
}

// Bulk applies params.Op to at most params.Limit jobs matching
// params.Filter to which it applies, oldest (lowest ID) first, in one
// transaction, and returns how many it changed; see store.BulkController
// and the BulkOp constants for which jobs each operation changes and how
// (Control's transitions). Invalid params fail with an error wrapping
// store.ErrInvalidParams and change nothing.
//
// Candidates are selected with the filter and the operation's states in
// one statement, in ID order, locked FOR UPDATE SKIP LOCKED (a job that a
// finishing host or another operator holds is skipped, never waited for),
// and changed in one round trip (see bulkApplier). A run-now of a dead or
// cancelled job with a unique key can collide with a job that took the
// key since: such candidates are changed one at a time under a savepoint,
// and one whose key is held is left alone; when some are left alone, more
// candidates are read until Limit jobs changed or none is left. Run-now
// notifies listeners once per kind on commit. Each statement gives up
// after 30 seconds (and the whole call then changes nothing).
func (s *Store) Bulk(ctx context.Context, params *store.BulkParams) (int, error) {
	return s.bulk(ctx, params, s.bulkApplier)
}

// bulk is Bulk, with applier choosing how the picked jobs are changed
// (a test passes run-now's per-job fallback).
func (s *Store) bulk(ctx context.Context, params *store.BulkParams, applier func(store.BulkOp) bulkApply) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if params == nil {
		return 0, fmt.Errorf("pgstore: bulk: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	pick, restore, a, err := s.bulkPickSQL(params)
	if err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	apply := applier(params.Op)

	changed := 0
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A filter no index serves may walk much of the table; a bound
		// keeps the transaction, and the rows it has locked, short.
		if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`,
			fmt.Sprint(inspectTimeout.Milliseconds())); err != nil {
			return err
		}
		if restore != "" {
			// Finished jobs stay where they are until this commits: an
			// archive in flight commits first (its rows would be
			// skipped as locked, or be in neither table), and none
			// starts meanwhile (Archive).
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.archiveLockKey()); err != nil {
				return err
			}
		}
		changed = 0
		a[len(a)-2] = [16]byte(uuid.Nil)
		for changed < params.Limit {
			want := params.Limit - changed
			a[len(a)-1] = want
			var restored []uuid.UUID
			if restore != "" {
				// The next candidates in the history come back to jobs
				// first, so that the pick sees them among the others
				// in ID order.
				back, err := collectIDs(tx.Query(ctx, restore, a...))
				if err != nil {
					return err
				}
				restored = back
			}
			ids, risky, err := pickBulk(ctx, tx, pick, a)
			if err != nil {
				return err
			}
			n, err := applyBulk(ctx, tx, apply, ids, risky)
			if err != nil {
				return err
			}
			if len(restored) > 0 {
				// Those the pick did not reach, or that the operation
				// left alone (a key held), go back before this commits:
				// a finished row left in jobs with an old finished_at is
				// behind every later archive pass's starting point.
				if _, err := tx.Exec(ctx, s.sql(returnSQL), idBytes(restored)); err != nil {
					return err
				}
			}
			changed += n
			if len(ids) < want {
				return nil // no candidate left
			}
			a[len(a)-2] = [16]byte(ids[len(ids)-1])
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	return changed, nil
}

// bulkPickSQL builds the statement selecting and locking the next
// candidates of params (valid), and its arguments, whose last two are the
// cursor (the last candidate's ID, uuid.Nil at first) and the limit, to
// be set before each run. When the op applies to finished jobs, restore
// is the statement moving the next candidates in jobs_history back to
// jobs, with the same arguments ("" otherwise): restoreSQL of the
// candidates' pick. risky marks a run-now that may
// take a unique key another job holds: a cancelled job never holds its
// key, and a dead one holds it only in some scopes (store.UniqueScope), so
// either may find it taken.
func (s *Store) bulkPickSQL(params *store.BulkParams) (pick, restore string, a sqlArgs, err error) {
	terms, err := filterTerms(&params.Filter, &a, filterParts{noStates: len(params.Filter.States) > 0})
	if err != nil {
		return "", "", nil, err
	}
	terms = append(terms, bulkTargetSQL(params.Op, params.Filter.States))
	after, limit := a.add([16]byte(uuid.Nil)), a.add(0)
	where := whereSQL(append(terms, "id > "+after))
	pick = `SELECT id, state IN ('dead', 'cancelled') AND unique_key IS NOT NULL AS risky FROM ` + s.jobsTable() +
		` WHERE ` + where + ` ORDER BY id LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED`
	if slices.ContainsFunc(bulkTargets[params.Op], func(t bulkTarget) bool { return t.state.Final() }) {
		restore = s.sql(restoreSQL(`ARRAY(SELECT id FROM {history} WHERE ` + where +
			` ORDER BY id LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED)`))
	}
	return pick, restore, a, nil
}

// pickBulk runs the candidates' statement and returns their IDs, in order,
// and which of them are risky.
func pickBulk(ctx context.Context, tx pgx.Tx, pick string, args []any) ([]uuid.UUID, []bool, error) {
	rows, _ := tx.Query(ctx, pick, args...)
	var (
		ids   []uuid.UUID
		risky []bool
		id    uuid.UUID
		r     bool
	)
	_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id), &r}, func() error {
		ids, risky = append(ids, id), append(risky, r)
		return nil
	})
	return ids, risky, err
}

// bulkApply changes the jobs ids, locked by tx, and returns how many it
// changed.
type bulkApply func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error)

// runNowOneGuard is how Control's run-now statement (queries.go) selects
// its job; runNowSetGuard selects every job of an array instead.
const (
	runNowOneGuard = "WHERE id = $1 AND"
	runNowSetGuard = "WHERE id = ANY($1::uuid[]) AND"
)

// bulkApplier returns how op changes the jobs it picked. Run-now runs
// Control's own statement, so that a bulk retry makes exactly the change a
// retry of one job makes (attempt numbering included) and notifies as it
// does (the notifications of one kind in one transaction are identical,
// and PostgreSQL delivers them once): on all the jobs at once, its guard
// on one ID widened to an array, or, should that statement no longer have
// the guard this code knows, once per job, every run queued in one round
// trip (several times slower). Cancel and delete are one set-based
// statement each.
func (s *Store) bulkApplier(op store.BulkOp) bulkApply {
	if set := s.runNowSetSQL(); op == store.BulkRunNow && set != "" {
		return func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error) {
			tag, err := tx.Exec(ctx, set, idBytes(ids), s.channel)
			return int(tag.RowsAffected()), err
		}
	}
	if op == store.BulkRunNow {
		return s.runNowEach
	}
	q := strings.ReplaceAll(bulkApplySQL[op], "{jobs}", s.jobsTable())
	return func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error) {
		var n int
		err := tx.QueryRow(ctx, q, idBytes(ids)).Scan(&n)
		return n, err
	}
}

// runNowEach runs Control's run-now statement once per job of ids, every
// run queued in one round trip.
func (s *Store) runNowEach(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error) {
	b := &pgx.Batch{}
	for _, id := range ids {
		b.Queue(s.q.runNow, [16]byte(id), s.channel)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	n := 0
	for range ids {
		tag, err := br.Exec()
		if err != nil {
			return 0, err
		}
		n += int(tag.RowsAffected())
	}
	return n, br.Close()
}

// runNowSetSQL returns Control's run-now statement applied to the array
// of IDs $1, or "" when its guard is not runNowOneGuard.
func (s *Store) runNowSetSQL() string {
	if strings.Count(s.q.runNow, runNowOneGuard) != 1 {
		return ""
	}
	return strings.Replace(s.q.runNow, runNowOneGuard, runNowSetGuard, 1)
}

// applyBulk applies apply to ids (locked by this transaction): the safe
// ones at once, the risky ones each under a savepoint, a unique violation
// leaving that one alone. It returns how many changed.
func applyBulk(ctx context.Context, tx pgx.Tx, apply bulkApply, ids []uuid.UUID, risky []bool) (int, error) {
	var safe, one []uuid.UUID
	for i, id := range ids {
		if !risky[i] {
			safe = append(safe, id)
		} else {
			one = append(one, id)
		}
	}
	changed := 0
	if len(safe) > 0 {
		n, err := apply(ctx, tx, safe)
		if err != nil {
			return 0, err
		}
		changed += n
	}
	for _, id := range one {
		n, err := bulkOne(ctx, tx, apply, id)
		if err != nil {
			return 0, err
		}
		changed += n
	}
	return changed, nil
}

// bulkOne applies apply to one job under a savepoint; a unique violation
// (its key is held by another job) rolls back to it and counts nothing.
func bulkOne(ctx context.Context, tx pgx.Tx, apply bulkApply, id uuid.UUID) (int, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, err
	}
	n, err := apply(ctx, sp, []uuid.UUID{id})
	if isUniqueViolation(err) {
		return 0, sp.Rollback(ctx)
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return 0, err
	}
	return n, sp.Commit(ctx)
}
