package pgstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A job's end is its last write. The Finish statements (the plain one and
// flow's) delete a job that their outcome ends from jobs and insert its
// final row into jobs_history in the same statement, when nothing keeps it
// in the hot table (finishLeavesSQL): before, its Finish updated the row
// in jobs and an archive pass moved it later, which wrote every finished
// job twice and cost about a third of the WAL a job made. The archive pass
// stays for what must wait (kept unique keys, follow-ups, batches,
// sequences, results, jobs ended by rescues and operators).
//
// The insert needs the history partition of the store clock's day, which
// a statement cannot create. So a Finish moves jobs only while the store
// clock is within the days whose partitions this Store knows exist
// (finishWindow): the host's day and the next one, created ahead of use,
// once a day per process. Outside them (a store clock hours away from
// the host's, a partition that could not be created), jobs stay in jobs
// as before and the archive pass moves them.

// finishDaysRetry is how long a Store waits before trying again to create
// the partitions finishWindow needs after a failure.
const finishDaysRetry = time.Minute

// keepRowsKey marks a context whose Finish must leave the jobs it ends in
// jobs: its caller writes more to their rows in the same transaction
// (results: finishExtras).
type keepRowsKey struct{}

// finishWindow returns the store-clock times [lo, hi) in which a Finish
// may move the jobs it ends into the history, or nils: none. It makes sure
// the partitions of the host's day and the next one exist (on the pool,
// in a transaction of their own, never the caller's), once a day per
// process; a call that finds another making them, or a recent failure,
// does not wait and uses what is known. A Finish inside a transaction
// (CompleteTx's, or AX's own for results) does not make them: that would
// take a second pool connection while the transaction holds one, and a
// pool exhausted by such transactions would wait for itself. It uses
// what is known; rows it cannot move stay for the archive pass.
func (s *Store) finishWindow(ctx context.Context) (lo, hi *time.Time) {
	if ctx.Value(keepRowsKey{}) != nil {
		return nil, nil
	}
	today := dayOf(time.Now())
	tomorrow := today.Add(historyDay)
	h := &s.history
	h.mu.Lock()
	known, next, retry := h.days[today], h.days[tomorrow], h.ensureAfter
	h.mu.Unlock()
	_, inTx := ctx.Value(connKey{}).(querier)
	if !(known && next) && !inTx && time.Now().After(retry) && h.ensuring.TryLock() {
		err := s.ensureDays(ctx, today, tomorrow)
		h.ensuring.Unlock()
		h.mu.Lock()
		if err != nil {
			h.ensureAfter = time.Now().Add(finishDaysRetry)
		}
		known, next = h.days[today], h.days[tomorrow]
		h.mu.Unlock()
	}
	if !known {
		return nil, nil
	}
	end := tomorrow
	if next {
		end = tomorrow.Add(historyDay)
	}
	return &today, &end
}

// ensureDays creates the history partitions of days that do not exist, in
// one transaction on the pool, and records them as known.
func (s *Store) ensureDays(ctx context.Context, days ...time.Time) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, d := range days {
			if err := s.ensurePartition(ctx, tx, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	h := &s.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.days == nil {
		h.days = map[time.Time]bool{}
	}
	for _, d := range days {
		h.days[d] = true
	}
	return nil
}

// isNoPartition reports whether err is PostgreSQL finding no history
// partition for a row: one this Store knew was dropped (by hand; Prune
// drops only days past the retention). The known partitions are
// forgotten, so that the next Finish checks them again, and the caller
// may retry.
func (s *Store) isNoPartition(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || !strings.HasPrefix(pe.Message, "no partition of relation") {
		return false
	}
	s.history.mu.Lock()
	s.history.days = nil
	s.history.mu.Unlock()
	return true
}
