package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClaimSQL returns the claim statement, for the EXPLAIN test.
func (s *Store) ClaimSQL() string { return s.q.claim }

// ClaimOpenSQL returns the open claim (claimOpenSQL), which claims whose
// kinds' limits do not bind make.
func (s *Store) ClaimOpenSQL() string { return s.q.claimOpen }

// ClaimOneKindSQL returns the claim of one kind (claimOneKindSQL).
func (s *Store) ClaimOneKindSQL() string { return s.q.claimOneKind }

// ClaimSpare returns the spare rows the Store's next open claim reads.
func (s *Store) ClaimSpare() int64 { return s.spare.get() }

// ClaimLostSQL returns the claim's second round (claimLostSQL), for tests
// that hold a claim open.
func (s *Store) ClaimLostSQL() string { return s.q.claimLost }

// MigrateTo migrates DefaultSchema up to version only, as an older release
// of this package would have, for tests of upgrades.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if version < 1 || version > len(ms) {
		return fmt.Errorf("no migration %d", version)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return migrateTx(ctx, tx, DefaultSchema, ms[:version])
	})
}

// SetCursorAuditEvery changes how often claims audit their cursors, for
// tests of the cursors' safety net.
func (s *Store) SetCursorAuditEvery(d time.Duration) {
	s.cursors.mu.Lock()
	defer s.cursors.mu.Unlock()
	s.cursors.every = d
}

// RewindArchive makes the next Archive pass walk jobs_finished_idx from
// its start, as the full walk every minute does.
func (s *Store) RewindArchive() {
	s.history.mu.Lock()
	s.history.from = time.Time{}
	s.history.mu.Unlock()
}

// InsertClaimedSQL returns the insert that claims, for the EXPLAIN test.
func (s *Store) InsertClaimedSQL() string { return s.q.insertClaimed }

// JobColumns returns the columns reads scan, and the columns of jobs no
// read scans, for the catalog test.
func JobColumns() (read []string, unread map[string]string) {
	for _, c := range strings.Split(jobColumns, ",") {
		read = append(read, strings.TrimSpace(c))
	}
	return read, unreadColumns
}

// Restore moves the jobs ids back from the history to jobs, as RunNow and
// Bulk do before they change them, and returns how many it moved.
func (s *Store) Restore(ctx context.Context, ids []uuid.UUID) (int, error) {
	tag, err := s.pool.Exec(ctx, s.sql(restoreSQL("$1::uuid[]")), idBytes(ids))
	return int(tag.RowsAffected()), err
}

// SetListenerProbe changes when a quiet listener connection must answer,
// for the test of a connection that stops answering. Call it before the
// first Subscribe.
func (s *Store) SetListenerProbe(interval, timeout time.Duration) {
	s.listenerProbe = listenerProbe{interval: interval, timeout: timeout}
}

// CursorsOn reports whether the claim cursors are on (the listener
// listens).
func (s *Store) CursorsOn() bool {
	s.cursors.mu.Lock()
	defer s.cursors.mu.Unlock()
	return s.cursors.on
}

// HoldFlowCache makes the Store trust the flow settings it last read for
// the next hour, as within flowCacheTTL of reading them, for tests of a
// Store whose list is stale (a slow machine must not let it expire).
func (s *Store) HoldFlowCache() {
	s.flow.mu.Lock()
	defer s.flow.mu.Unlock()
	s.flow.loadedAt = time.Now().Add(time.Hour)
}

// FinishSetColumns returns the columns a Finish writes to the job it ends.
func FinishSetColumns() []string {
	cols := make([]string, len(finishSets))
	for i, f := range finishSets {
		cols[i] = f.col
	}
	return cols
}

// KeepFinishedRows returns ctx with which Finish leaves the jobs it ends in
// jobs, for the archive pass, as it does for the jobs it ends with results:
// tests of the pass make its input this way.
func KeepFinishedRows(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepRowsKey{}, true)
}

// FinishSQL returns the finish statement, for the FinishClaim test.
func (s *Store) FinishSQL() string { return s.q.finish }

// OnLeaseConn runs fn on the lease connection as ExtendLeases does (in
// its turn, opening it when none is open), for tests of that connection.
func (s *Store) OnLeaseConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	return s.leases.do(ctx, fn)
}

// LeaseConnOpen reports whether the lease connection is open, waiting
// for its turn.
func (s *Store) LeaseConnOpen() bool {
	c := <-s.leases.slot
	defer s.leases.giveBack(c)
	return c != nil && !c.IsClosed()
}

// SetLeaseDial replaces how the lease connection is opened.
func (s *Store) SetLeaseDial(dial func(context.Context) (*pgx.Conn, error)) {
	s.leases.dial = dial
}

// SetLeaseClock replaces the clock the lease connection's age is read on.
func (s *Store) SetLeaseClock(now func() time.Time) { s.leases.now = now }

// SetDetachTimeout changes how long a prune's DETACH CONCURRENTLY or
// FINALIZE may run, for the tests of its bound.
func (s *Store) SetDetachTimeout(d time.Duration) {
	s.history.mu.Lock()
	defer s.history.mu.Unlock()
	s.history.detachTimeout = d
}

// ErrDetachTimeout is the cause of a prune's detach cut short by its time
// bound.
var ErrDetachTimeout = errDetachTimeout

// UUIDV7Time returns the time a UUIDv7 carries, for the tests of the
// history ID probe's bound.
var UUIDV7Time = uuidV7Time

// HistorySpanRows is how many history rows the look at an insert's span
// of UUIDv7s reads before it probes them one by one instead.
const HistorySpanRows = historySpanRows

// HistoryIDsSQL returns the look into the history for the IDs of a
// several-row insert.
func (s *Store) HistoryIDsSQL() string { return s.sql(historyIDsSQL) }

// HistoryGuardSQL returns the history guard of the one-row inserts as a
// statement of its own on $1, for the tests of its bound.
func (s *Store) HistoryGuardSQL() string {
	return s.sql("WITH " + historyGuardSQL + " SELECT 1 FROM guard")
}

// SetAgedMixedHold sets how long the Store makes the open claim directly
// for a kind whose claim of one kind found aging mixing its ranges
// (agedMixedHold); call it before the Store's first claim.
func (s *Store) SetAgedMixedHold(d time.Duration) { s.agedMixed.hold = d }
