package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.BulkController = (*CitusStore)(nil)

// citusBulkCand is a job a Citus Bulk picked: its shard, and whether it
// is in the history.
type citusBulkCand struct {
	id        uuid.UUID
	slot      int
	inHistory bool
}

// Bulk applies params.Op to at most params.Limit matching jobs, oldest
// (lowest ID) first, in one transaction of the coordinator; see
// store.BulkController. Each shard's candidates are picked and locked by
// a statement on that shard (SKIP LOCKED: a job a host or another
// operator holds is skipped), in jobs and, for operations on finished
// jobs, in the history; the lowest IDs of all shards are changed as
// Control changes one job (run-now moves a job of the history back to
// jobs first), and a run-now whose unique key another job took since is
// left alone. Run-now notifies listeners once per kind on commit.
func (c *CitusStore) Bulk(ctx context.Context, params *store.BulkParams) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if params == nil {
		return 0, fmt.Errorf("pgstore: bulk: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	var a sqlArgs
	terms, err := filterTerms(&params.Filter, &a, filterParts{noStates: len(params.Filter.States) > 0})
	if err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	terms = append(terms, bulkTargetSQL(params.Op, params.Filter.States))
	limit := a.add(params.Limit)
	where := whereSQL(terms)
	history := slices.ContainsFunc(bulkTargets[params.Op], func(t bulkTarget) bool { return t.state.Final() })
	changed := 0
	err = pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
		changed = 0
		now, cands, err := c.bulkPick(ctx, tx, where, limit, a, history)
		if err != nil {
			return err
		}
		slices.SortFunc(cands, func(x, y citusBulkCand) int { return slices.Compare(x.id[:], y.id[:]) })
		if len(cands) > params.Limit {
			cands = cands[:params.Limit]
		}
		earliest := map[string]time.Time{}
		for _, cd := range cands {
			n, err := c.bulkOne(ctx, tx, params.Op, cd, now, earliest)
			if err != nil {
				return err
			}
			changed += n
		}
		return c.notify(ctx, tx, earliest)
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: bulk %s: %w", params.Op, err)
	}
	return changed, nil
}

// bulkPick sets the transaction's statement timeout, reads its clock and
// picks and locks every shard's candidates (in jobs, and with history in
// the history too: where, up to limit, lowest IDs first), all in one
// round trip: a pick per shard and table one after the other cost 32 to
// 64 round trips on 32 shards before any job was changed.
func (c *CitusStore) bulkPick(ctx context.Context, tx pgx.Tx, where, limit string, args sqlArgs,
	history bool) (now time.Time, cands []citusBulkCand, err error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('statement_timeout', $1, true)`, fmt.Sprint(inspectTimeout.Milliseconds()))
	b.Queue(`SELECT now()`)
	type pick struct {
		slot      int
		inHistory bool
	}
	var picks []pick
	for slot, p := range c.placed {
		tables := []string{p.jobsTable()}
		if history {
			tables = append(tables, p.historyTable())
		}
		for k, table := range tables {
			b.Queue(`SELECT id FROM `+table+` WHERE shard = `+fmt.Sprint(p.place.value)+` AND `+where+
				` ORDER BY id LIMIT `+limit+` FOR UPDATE SKIP LOCKED`, args...)
			picks = append(picks, pick{slot: slot, inHistory: k == 1})
		}
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return now, nil, err
	}
	if err := br.QueryRow().Scan(&now); err != nil {
		return now, nil, fmt.Errorf("read the clock: %w", err)
	}
	for _, pk := range picks {
		ids, err := collectIDs(br.Query())
		if err != nil {
			return now, nil, err
		}
		for _, id := range ids {
			cands = append(cands, citusBulkCand{id: id, slot: pk.slot, inHistory: pk.inHistory})
		}
	}
	return now, cands, br.Close()
}

// bulkOne applies op to the picked job cd (locked by tx) and returns
// whether it changed it (1) or not (0).
func (c *CitusStore) bulkOne(ctx context.Context, tx pgx.Tx, op store.BulkOp, cd citusBulkCand, now time.Time,
	earliest map[string]time.Time) (int, error) {
	p := c.placed[cd.slot]
	if op == store.BulkDelete {
		table := p.jobsTable()
		if cd.inHistory {
			table = p.historyTable()
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE shard = `+fmt.Sprint(p.place.value)+` AND id = $1`, [16]byte(cd.id))
		return int(tag.RowsAffected()), err
	}
	ctl := store.OpCancel
	if op == store.BulkRunNow {
		ctl = store.OpRunNow
	}
	// A run-now may find its unique key taken: under a savepoint, so that
	// it alone is left as it was.
	if _, err := tx.Exec(ctx, `SAVEPOINT ax_citus_bulk`); err != nil {
		return 0, err
	}
	n, err := c.bulkChange(ctx, tx, p, cd, ctl, now, earliest)
	if err != nil && (isUniqueViolation(err) || errorsIsWrongState(err)) {
		_, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT ax_citus_bulk; RELEASE SAVEPOINT ax_citus_bulk`)
		return 0, rerr
	}
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `RELEASE SAVEPOINT ax_citus_bulk`)
	return n, err
}

// bulkChange is bulkOne's change of one job by Control's rules.
func (c *CitusStore) bulkChange(ctx context.Context, tx pgx.Tx, p *Store, cd citusBulkCand, op store.ControlOp, now time.Time,
	earliest map[string]time.Time) (int, error) {
	if cd.inHistory {
		if _, err := tx.Exec(ctx, p.sql(citusRestoreSQL), [16]byte(cd.id)); err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, p.sql(citusUnarchiveSQL), [16]byte(cd.id)); err != nil {
			return 0, err
		}
	}
	jobs, _, err := lockRows(mustQuery(ctx, tx, p.sql(citusControlLockSQL), [16]byte(cd.id)))
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	j := jobs[0]
	n, change := controlChange(j, op, now)
	if !change {
		return 0, nil
	}
	if op == store.OpRunNow && j.State.Final() {
		var held bool
		if err := tx.QueryRow(ctx, p.sql(citusHeldInHistorySQL), [16]byte(cd.id)).Scan(&held); err != nil {
			return 0, err
		}
		if held {
			return 0, fmt.Errorf("a job in the history holds its unique key: %w", store.ErrWrongState)
		}
	}
	var w citusWrites
	if err := w.add(citusChange{j: n, keepToken: true}); err != nil {
		return 0, err
	}
	written, err := c.write(ctx, tx, cd.slot, &w)
	if err != nil || len(written) != 1 {
		return 0, err
	}
	if out := written[0]; out.State.Claimable() {
		noteEarliest(earliest, out.Kind, out.RunAt)
	}
	return 1, nil
}

// errorsIsWrongState reports whether err wraps store.ErrWrongState.
func errorsIsWrongState(err error) bool { return errors.Is(err, store.ErrWrongState) }
