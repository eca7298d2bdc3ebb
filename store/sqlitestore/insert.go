package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// Insert inserts jobs in one transaction, as store.Store.Insert documents.
// Every row is checked with InsertParams.Validate first, and one bad row
// fails the whole call with an error wrapping store.ErrInvalidParams, as
// does an ID that is taken (by a job in the store or an earlier row of the
// call). A nil payload is stored as JSON null; any other is kept byte for
// byte. A row with a zero RunAt is due Delay after the store's now; that
// run_at is also its ScheduledAt.
//
// Unique keys hold in the scope store.UniqueScope documents, enforced by a
// unique partial index over (scope, key) on the rows that hold their key: a
// live job, or a succeeded or dead one whose scope keeps it (Finished, or
// a Period window); a cancelled job never holds its key. A row whose key
// is held is not inserted: its result carries the holder's ID and
// Duplicate = true. A Period window is that of the store's now at the
// insert. Each row costs O(log n), so a call of n rows costs O(n log n).
func (s *Store) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := validateAll(params); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if len(params) == 0 {
		return nil, s.usableErr(ctx, "insert jobs")
	}
	var res []store.InsertResult
	err := s.write(ctx, func(w *wtx) error {
		var err error
		res, err = w.insert(params, uuid.Nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	return res, nil
}

// usableErr wraps usable's error, if any, with what.
func (s *Store) usableErr(ctx context.Context, what string) error {
	if err := s.usable(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// validateAll checks every row.
func validateAll(params []store.InsertParams) error {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
	}
	return nil
}

// InsertTx inserts jobs, as Insert does, inside tx, a transaction of the
// caller's on the same database file, so that the jobs exist only if tx
// commits, together with the business writes they belong to:
//
//	tx, err := st.DB().BeginTx(ctx, nil) // the Store's writer: BEGIN IMMEDIATE
//	...                                   // business writes on tx
//	res, err := st.InsertTx(ctx, tx, []store.InsertParams{...})
//	...
//	err = tx.Commit()
//
// Begin tx on DB (see DB for what that implies); a transaction of another
// handle on the file works too, but then tx and the Store's writer contend
// for the file's write lock under the busy timeout. The params are built as
// Scheduler.Schedule would: a UUIDv7 ID, the kind, the payload as JSON, a
// priority and MaxAttempts (see store.InsertParams).
//
// The Store's subscribers are notified as soon as the rows are inserted,
// before tx commits: a claim they start waits for the write lock tx holds,
// so it finds the jobs once tx committed, and finds nothing if tx rolled
// back. Errors are Insert's; on an error, roll tx back (the failed rows
// may have been written in part).
func (s *Store) InsertTx(ctx context.Context, tx *sql.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	if tx == nil {
		return nil, fmt.Errorf("insert jobs in tx: %w: nil transaction", store.ErrInvalidParams)
	}
	if err := validateAll(params); err != nil {
		return nil, fmt.Errorf("insert jobs in tx: %w", err)
	}
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("insert jobs in tx: %w", err)
	}
	if len(params) == 0 {
		return nil, nil
	}
	w := &wtx{s: s, ctx: context.WithoutCancel(ctx), tx: tx, now: s.clock()}
	res, err := w.insert(params, uuid.Nil)
	if err != nil {
		return nil, fmt.Errorf("insert jobs in tx: %w", s.dbErr(err))
	}
	s.subs.deliver(w.notes.list)
	return res, nil
}

// insert inserts validated rows (children of batch, when not zero). Rows
// with a unique key go one statement each, in order, so that a row finds
// the keys of earlier rows of the call held; rows without one, which
// nothing in the call can make duplicates, go in statements of many rows
// (insertMany).
func (w *wtx) insert(params []store.InsertParams, batch uuid.UUID) ([]store.InsertResult, error) {
	if err := w.checkPending(params); err != nil {
		return nil, err
	}
	res := make([]store.InsertResult, len(params))
	var plain []int
	for i := range params {
		p := &params[i]
		if p.UniqueKey == "" && len(params) > 1 {
			plain = append(plain, i)
			continue
		}
		r, err := w.insertRow(p, uuid.Nil, batch, false)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		res[i] = r
	}
	if err := w.insertMany(params, plain, batch); err != nil {
		return nil, err
	}
	for _, i := range plain {
		res[i] = store.InsertResult{ID: params[i].ID}
	}
	return res, nil
}

// maxManyBytes bounds the JSON text of one insertMany statement, far below
// SQLite's limit on the length of a value.
const maxManyBytes = 8 << 20

// insertMany inserts the rows of params at idx, which have no unique key,
// in statements of many rows each: the rows travel as one JSON array, so a
// call of n rows costs a few statements, not n. A taken ID fails it with
// an error wrapping store.ErrInvalidParams.
func (w *wtx) insertMany(params []store.InsertParams, idx []int, batch uuid.UUID) error {
	var (
		buf  []byte
		rows int
	)
	flush := func() error {
		if rows == 0 {
			return nil
		}
		buf = append(buf, ']')
		_, err := w.exec(qInsertMany, toUS(w.now), idArg(batch), string(buf))
		buf, rows = buf[:0], 0
		if isConstraint(err) {
			return fmt.Errorf("%w: a job ID already exists (%v)", store.ErrInvalidParams, err)
		}
		return err
	}
	for _, i := range idx {
		p := &params[i]
		runAt := p.RunAt
		if runAt.IsZero() {
			runAt = w.now.Add(p.Delay)
		}
		runAt = fromUS(runAt.UnixMicro())
		payload := "null"
		if p.Payload != nil {
			payload = string(p.Payload)
		}
		md, err := encodeMetadata(p.Metadata)
		if err != nil {
			return fmt.Errorf("row %d: %w: metadata: %w", i, store.ErrInvalidParams, err)
		}
		fus, err := encodeFollowUps(p.FollowUps)
		if err != nil {
			return fmt.Errorf("row %d: %w: follow-ups: %w", i, store.ErrInvalidParams, err)
		}
		pkey, err := w.partitionKey(p)
		if err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		row, err := json.Marshal([10]any{hex.EncodeToString(p.ID[:]), p.Kind, payload, md, p.Priority, toUS(runAt), p.MaxAttempts,
			fus, pkey, nullText(p.SequenceKey)})
		if err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		if rows > 0 && len(buf)+len(row) > maxManyBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		if rows == 0 {
			buf = append(buf, '[')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, row...)
		rows++
		w.notify(p.Kind, runAt)
	}
	return flush()
}

// insertRow inserts one validated job. With a unique key held in its
// scope, it inserts nothing and returns the holder. keyless drops the
// unique key (follow-ups, Then jobs and batch completions), puts a job
// whose partition key PartitionKeyOf refuses in the partition "", and
// makes a taken ID a no-op rather than an error (a Then job inserted
// already).
func (w *wtx) insertRow(p *store.InsertParams, parent, batch uuid.UUID, keyless bool) (store.InsertResult, error) {
	runAt := p.RunAt
	if runAt.IsZero() {
		runAt = w.now.Add(p.Delay)
	}
	runAt = fromUS(runAt.UnixMicro())
	payload := "null"
	if p.Payload != nil {
		payload = string(p.Payload)
	}
	md, err := encodeMetadata(p.Metadata)
	if err != nil {
		return store.InsertResult{}, fmt.Errorf("%w: metadata: %w", store.ErrInvalidParams, err)
	}
	fus, err := encodeFollowUps(p.FollowUps)
	if err != nil {
		return store.InsertResult{}, fmt.Errorf("%w: follow-ups: %w", store.ErrInvalidParams, err)
	}
	pkey, err := w.partitionKey(p)
	if err != nil && keyless {
		// A job made from a template at its parent's end (keyless: a
		// follow-up, a Then job, a batch completion) cannot refuse that
		// end: a key PartitionKeyOf refuses puts it in the partition "",
		// as on the other stores (conformance FlowPartitionPaths).
		pkey, err = "", nil
	}
	if err != nil {
		return store.InsertResult{}, err
	}
	var (
		key, ukey  any
		u          store.UniqueScope
		keep, seen bool
	)
	if p.UniqueKey != "" && !keyless {
		u = p.Unique
		key, ukey = p.UniqueKey, scopedKey(p.Kind, p.UniqueKey, u, w.now)
		keep = u.Finished || u.Period > 0
	}
	q := qInsert
	if keyless {
		q = qInsertIfAbsent
	}
	res, err := w.exec(q, p.ID[:], p.Kind, payload, md, p.Priority, toUS(runAt), toUS(runAt), p.MaxAttempts,
		key, boolInt(u.Global), boolInt(u.Finished), int64(u.Period/time.Second), ukey, boolInt(keep),
		toUS(w.now), fus, idArg(parent), idArg(batch), pkey, nullText(p.SequenceKey))
	switch {
	case isConstraint(err):
		return store.InsertResult{}, fmt.Errorf("%w: job ID %s already exists (%v)", store.ErrInvalidParams, p.ID, err)
	case err != nil:
		return store.InsertResult{}, err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return store.InsertResult{}, err
	case n == 0 && keyless:
		return store.InsertResult{ID: p.ID, Duplicate: true}, nil
	case n == 0:
		seen = true
	}
	if seen {
		var holder []byte
		if err := w.queryRow(qHolder, ukey).Scan(&holder); err != nil {
			return store.InsertResult{}, fmt.Errorf("find the holder of unique key %q: %w", p.UniqueKey, err)
		}
		id, err := idFrom(holder)
		return store.InsertResult{ID: id, Duplicate: true}, err
	}
	w.notify(p.Kind, runAt)
	return store.InsertResult{ID: p.ID}, nil
}

// scopedKey returns key in its scope: the kind's (length-prefixed, so that
// no kind and key can pass for another pair) or the global one, then the
// Period window of now, when the scope has one.
func scopedKey(kind, key string, u store.UniqueScope, now time.Time) string {
	var b strings.Builder
	if u.Global {
		b.WriteString("g|")
	} else {
		b.WriteString("k")
		b.WriteString(strconv.Itoa(len(kind)))
		b.WriteByte('|')
		b.WriteString(kind)
		b.WriteByte('|')
	}
	if u.Period > 0 {
		secs := int64(u.Period / time.Second)
		window := now.Unix() / secs // now is after 1970: no negative division
		b.WriteString("p")
		b.WriteString(strconv.FormatInt(secs, 10))
		b.WriteByte('@')
		b.WriteString(strconv.FormatInt(window, 10))
		b.WriteByte('|')
	}
	b.WriteString(key)
	return b.String()
}

// Get returns the job with the given ID, or an error wrapping
// store.ErrNotFound.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	var rec *store.JobRecord
	err := s.read(ctx, false, func(r *rtx) error {
		j, err := scanJob(r.queryRow(qGetID, id[:]))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		rec, err = j.record()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	return rec, nil
}
