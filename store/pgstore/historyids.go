package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// An insert's ID and the history (issue 41).
//
// jobs' primary key refuses the ID of a job in jobs, but a unique index
// cannot span jobs and jobs_history: an insert reusing the ID of a job
// already moved to the history made a second job with that ID (Get then
// returned the new one, listings both). Every insert now looks in the
// history too, through the (id) index of each day partition, and to keep
// that to one or two partitions the look is bounded by the time a UUIDv7
// carries.
//
// The bound: a job is inserted after its ID was made and finishes after
// it is inserted, so a job whose UUIDv7 carries time T has a finished_at
// (the database clock) of at least T, less the difference between the
// clock of the host that made the ID and the database's. The look covers
// jobs finished from T - historyIDSkew on: partition pruning leaves the
// partitions of that day and later (for an ID made now, today's and the
// next day's that Finish makes ahead; the day before too in the first
// historyIDSkew of a day), whatever the retention. An ID that is not a
// UUIDv7 carries no time: it is looked for in every partition (one index
// probe per retained day). What the bound misses: a UUIDv7 made with a
// clock more than historyIDSkew ahead of the database's, reused after its
// job finished before the database's clock reached T - historyIDSkew. ax
// makes a UUIDv7 for every job at its insert, from the host's clock.
//
// Where: one job (Insert and InsertTx of one row, InsertClaimed, a flow
// kind's one row) goes in one statement, and the look is folded into it
// (historyGuardSQL: no extra round trip, two index probes in the same
// statement); the guard fails the statement with PostgreSQL's
// invalid_text_representation, whose text names the ID, so the call's
// error wraps store.ErrInvalidParams as for any data PostgreSQL refuses.
// Several jobs (COPY, keyed rows, batches' children, periodic ticks,
// follow-ups' parents) are looked up first in the same transaction
// (refuseHistoryIDs, called by insertMany: one statement for the whole
// call). A job moved into the history by a transaction that commits
// while the insert runs is not seen (the statement's snapshot).

// historyIDSkew is how far apart the clocks of the host that made a
// UUIDv7 and of the database may be for the look to find the job.
const historyIDSkew = time.Hour

// historyGuardSQL is a CTE, guard, for the statements inserting one job
// with ID $1: it fails the statement when $1 is the ID of a job in the
// history finished from its UUIDv7 time less historyIDSkew on (or at any
// time, for an ID of another version). The cast of the message to uuid is
// what fails: plain SQL has no RAISE. The statement reads guard in its
// insert (NOT EXISTS), so the guard runs before the row is written.
var historyGuardSQL = `guard AS MATERIALIZED (
	SELECT ('job ID ' || h.id || ' is that of a finished job in the history')::uuid
	FROM {history} h
	WHERE h.id = $1::uuid AND h.finished_at >= CASE WHEN substr($1::uuid::text, 15, 1) = '7'
		THEN to_timestamp((('x' || substr(replace($1::uuid::text, '-', ''), 1, 12))::bit(48)::bigint - ` +
	strconv.FormatInt(historyIDSkew.Milliseconds(), 10) + `) / 1000.0)
		ELSE '-infinity' END
	LIMIT 1
)`

// historyIDsSQL reads the transaction's start and the store clock (as
// insertMany needs them) and looks in the history two ways, in one round
// trip:
//
//   - probes: among the IDs $1, one of a job in the history that finished
//     at $2 or later, each ID looked up on its own (a lateral probe by
//     id). As one = ANY over the history, the planner could read a young
//     partition without statistics (autovacuum off, or not yet run) by
//     finished_at, every row of it, and an insert of many jobs beside a
//     fast-growing history slowed with the history's size (axbench's
//     TestQuick/wide stalled for minutes).
//   - span: the IDs of the jobs in the history between $3 and $4 that
//     finished at $5 or later, in ID order, at most historySpanRows of
//     them. ORDER BY id with a LIMIT reads the (id) index of each
//     partition left after pruning, in order, and stops: it reads the
//     history's rows in that span, not one index descent per ID.
const historyIDsSQL = `SELECT now(), statement_timestamp(),
	(SELECT h.id FROM unnest($1::uuid[]) AS u(id)
	 CROSS JOIN LATERAL (SELECT id FROM {history} h WHERE h.id = u.id AND h.finished_at >= $2 LIMIT 1) h
	 LIMIT 1),
	ARRAY(SELECT h.id FROM {history} h WHERE h.id >= $3::uuid AND h.id <= $4::uuid AND h.finished_at >= $5
	 ORDER BY h.id LIMIT ` + historySpanRowsText + `)`

// historySpanRows bounds the span's rows: a span that holds more (IDs
// spread over a long time, beside a busy history) is looked up by probes
// instead, in a second statement.
const (
	historySpanRows     = 1024
	historySpanRowsText = "1024"
)

// refuseHistoryIDs fails with store.ErrInvalidParams when one of the jobs
// params would insert has the ID of a job in the history; see above for
// which partitions it reads. An ID whose time is more than twice
// historyIDSkew ahead of this host's clock cannot be that of a finished
// job, and is not looked for. It returns now() (the transaction's start)
// and statement_timestamp() (the store clock), read in the same
// statement, which insertMany needs anyway.
//
// How: a UUIDv7 sorts by its time, so the UUIDv7s of one call (ax makes
// them at the call, within milliseconds) lie in a narrow span of the
// history's (id) index. The span's finished jobs are read in one range
// scan and matched here; a job made in that span and finished already is
// rare, so this reads a few index entries where a probe per ID made one
// index descent per ID and partition: about a quarter of a COPY insert's
// time (axbench insert, docs/performance.md). IDs of another version
// carry no time and no order, and are probed one by one, as are the
// UUIDv7s when their span holds historySpanRows jobs or more.
func (s *Store) refuseHistoryIDs(ctx context.Context, q querier, params []store.InsertParams) (now, clock time.Time, err error) {
	probe := make([]uuid.UUID, 0)
	horizon := time.Now().Add(historyIDSkew)
	var v7 historySpan
	for i := range params {
		id := params[i].ID
		t, ok := uuidV7Time(id)
		if !ok {
			probe = append(probe, id)
			continue
		}
		if t = t.Add(-historyIDSkew); t.After(horizon) {
			continue // made in the future: not finished yet
		}
		v7.add(id, t)
	}
	var (
		probed *[16]byte
		inSpan [][16]byte
	)
	probeFrom := store.MinTime // an ID without a time: every partition
	if len(probe) == 0 {
		probeFrom = store.MaxTime // none: no partition
	}
	lo, hi, from := v7.bounds()
	err = q.QueryRow(ctx, s.sql(historyIDsSQL), idBytes(probe), probeFrom, [16]byte(lo), [16]byte(hi), from).Scan(&now, &clock, &probed, &inSpan)
	if err != nil {
		return now, clock, fmt.Errorf("look for the IDs in the history: %w", err)
	}
	if probed != nil {
		return now, clock, historyIDErr(*probed)
	}
	if len(inSpan) < historySpanRows {
		if id, ok := v7.find(idsOf(inSpan)); ok {
			return now, clock, historyIDErr(id)
		}
		return now, clock, nil
	}
	// A crowded span: probe the UUIDv7s one by one. The clocks stay the
	// first statement's.
	err = q.QueryRow(ctx, s.sql(historyIDsSQL), idBytes(v7.ids), from, [16]byte(uuid.Max), [16]byte(uuid.Nil), store.MaxTime).
		Scan(new(time.Time), new(time.Time), &probed, &inSpan)
	if err != nil {
		return now, clock, fmt.Errorf("look for the IDs in the history: %w", err)
	}
	if probed != nil {
		return now, clock, historyIDErr(*probed)
	}
	return now, clock, nil
}

// historyIDErr is the error of an insert whose ID is that of a job in the
// history.
func historyIDErr(id uuid.UUID) error {
	return fmt.Errorf("%w: job ID %s is that of a finished job in the history", store.ErrInvalidParams, id)
}

// historySpan gathers the UUIDv7s of an insert: their span in ID order and
// the earliest finish time a job of one of them can have.
type historySpan struct {
	ids    []uuid.UUID
	lo, hi uuid.UUID
	from   time.Time
}

// add adds id, whose job finished at from or later if it finished.
func (h *historySpan) add(id uuid.UUID, from time.Time) {
	if len(h.ids) == 0 || bytes.Compare(id[:], h.lo[:]) < 0 {
		h.lo = id
	}
	if len(h.ids) == 0 || bytes.Compare(id[:], h.hi[:]) > 0 {
		h.hi = id
	}
	if len(h.ids) == 0 || from.Before(h.from) {
		h.from = from
	}
	h.ids = append(h.ids, id)
}

// bounds returns the span to read, and the earliest finish: with no
// UUIDv7, an empty span (lo above hi) that reads nothing.
func (h *historySpan) bounds() (lo, hi uuid.UUID, from time.Time) {
	if len(h.ids) == 0 {
		return uuid.Max, uuid.Nil, store.MaxTime
	}
	return h.lo, h.hi, h.from
}

// find returns one of the span's IDs that is among found (the history's
// jobs in the span).
func (h *historySpan) find(found []uuid.UUID) (uuid.UUID, bool) {
	if len(found) == 0 {
		return uuid.UUID{}, false
	}
	in := make(map[uuid.UUID]struct{}, len(found))
	for _, id := range found {
		in[id] = struct{}{}
	}
	for _, id := range h.ids {
		if _, ok := in[id]; ok {
			return id, true
		}
	}
	return uuid.UUID{}, false
}

// uuidV7Time returns the time a UUIDv7 carries (its first 48 bits, Unix
// milliseconds), or false for another version.
func uuidV7Time(id uuid.UUID) (time.Time, bool) {
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		return time.Time{}, false
	}
	var ms int64
	for _, b := range id[:6] {
		ms = ms<<8 | int64(b)
	}
	return time.UnixMilli(ms), true
}
