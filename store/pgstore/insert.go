package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/axsched/ax/store"
)

// querier is what inserts (and flow finishes) need of a pool or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// maxInsertRetries bounds the retries of an insert whose unique key holder
// vanished (was cancelled or rolled back) between conflict and lookup.
const maxInsertRetries = 10

// errHolderVanished is retried internally.
var errHolderVanished = errors.New("pgstore: unique key holder vanished")

// Insert inserts jobs as store.Store requires. One job takes one round trip
// (a single statement inserting the row, or finding the holder of its
// unique key, and notifying listeners). Several jobs are written in one
// transaction: rows without a unique key through COPY, rows with one through
// a multi-row INSERT … ON CONFLICT DO NOTHING in key order, under a
// savepoint (two more short round trips; see insertAllKeyed). Listeners
// get one notification per kind, with the earliest run_at, when it
// commits. Each job's ScheduledAt is the run_at it is inserted with, and
// its payload is stored as the text given (a json column). Rows that
// InsertParams.Validate refuses, or that PostgreSQL refuses as data, fail
// the call with an error wrapping store.ErrInvalidParams.
//
// An ID that exists is refused through the primary key of jobs, which
// holds the live jobs and the recently finished, and for a job in
// jobs_history by a look into the day partitions the time of its UUIDv7
// allows (every partition for an ID of another version): folded into
// the statement for one row, one statement first for several
// (historyids.go, which says what the bound misses).
//
// Unique keys hold in their store.UniqueScope through one unique partial
// index, jobs_unique_scope_idx (migration 0004), keyed on where the key
// holds (the kind, or the empty text for a global key; the Period and its
// window; the key) over the rows that hold their key (live jobs, and
// succeeded or dead ones whose scope keeps it). An insert that would take
// a held key does nothing and returns the holder (ON CONFLICT DO NOTHING,
// then a lookup on the same index, tried again if the holder gave the key
// up in between). A Period window is that of the store clock
// (statement_timestamp(), as Store.Now) at the insert, not of the
// transaction's start: in InsertTx, late in a long transaction, a job
// lands in the window of its insert.
func (s *Store) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := validateInserts(params); err != nil {
		return nil, err
	}
	// The kinds' cursors stay down until the rows commit (cursor.go).
	defer s.cursors.hold(params)()
	if len(params) == 0 {
		return []store.InsertResult{}, nil
	}
	if len(params) == 1 && len(params[0].FollowUps) == 0 {
		// One round trip, unless the row needs the flow steps.
		flow, err := s.flowInserts(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("pgstore: insert: %w", err)
		}
		if !flow {
			res, err := s.insertOne(ctx, s.pool, &params[0])
			if err != nil {
				return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
			}
			return []store.InsertResult{res}, nil
		}
	}
	var res []store.InsertResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.insertRows(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
	}
	return res, nil
}

// InsertTx inserts jobs inside the caller's transaction, with the same rules
// as Insert: the jobs exist only if tx commits, and listeners are notified
// only then (NOTIFY is transactional). Run-at delays are counted from the
// transaction's start (PostgreSQL's now()). On error, tx is left for the
// caller to roll back; a failed statement aborts a PostgreSQL transaction.
func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("pgstore: insert: nil transaction: %w", store.ErrInvalidParams)
	}
	if err := validateInserts(params); err != nil {
		return nil, err
	}
	ctx = withConn(ctx, tx) // every read on tx, none on a second connection: onetx.go
	// The kinds' cursors stay down until this returns (cursor.go).
	defer s.cursors.hold(params)()
	if len(params) == 0 {
		return []store.InsertResult{}, nil
	}
	res, err := s.insertRows(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
	}
	return res, nil
}

// validateInserts checks every row before anything is sent, so that one
// bad row changes nothing.
func validateInserts(params []store.InsertParams) error {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return fmt.Errorf("pgstore: insert job %d: %w", i, err)
		}
	}
	return nil
}

// payloadJSON returns the payload to store: nil is JSON null. Anything else
// goes as it is: pgx sends a []byte for a json parameter or COPY column as
// the raw text, which the json type keeps byte for byte.
func payloadJSON(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

func metadataJSON(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	return json.Marshal(m)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// scopeOf returns the scope to store for p: its own, or the zero scope
// for a job without a key.
func scopeOf(p *store.InsertParams) store.UniqueScope {
	if p.UniqueKey == "" {
		return store.UniqueScope{}
	}
	return p.Unique
}

// periodSeconds returns u's Period in seconds (Validate allows only whole
// seconds, at most store.MaxUniquePeriod: an int32).
func periodSeconds(u store.UniqueScope) int32 {
	return int32(u.Period / time.Second)
}

// scopedKey is a unique key where it holds: space is the kind, or "" for
// a global key, and window the Period window of the insert (0 without a
// Period), as jobs_unique_scope_idx keys it.
type scopedKey struct {
	space  string
	period int32
	window int64
	key    string
}

// scopedKeyOf returns p's key in its scope, for an insert at now (the
// store clock).
func scopedKeyOf(p *store.InsertParams, now time.Time) scopedKey {
	k := scopedKey{space: p.Kind, period: periodSeconds(p.Unique), key: p.UniqueKey}
	if p.Unique.Global {
		k.space = ""
	}
	if k.period > 0 {
		k.window = now.Unix() / int64(k.period) // now is after 1970: the same as floor
	}
	return k
}

// less orders keys as jobs_unique_scope_idx does, near enough to give
// concurrent calls one order in which to wait on each other's keys.
func (k scopedKey) less(o scopedKey) bool {
	switch {
	case k.space != o.space:
		return k.space < o.space
	case k.period != o.period:
		return k.period < o.period
	case k.window != o.window:
		return k.window < o.window
	}
	return k.key < o.key
}

func (s *Store) insertOne(ctx context.Context, q querier, p *store.InsertParams) (store.InsertResult, error) {
	meta, err := metadataJSON(p.Metadata)
	if err != nil {
		return store.InsertResult{}, err
	}
	pkeys, err := s.partitionKeys(ctx, q, *p)
	if err != nil {
		return store.InsertResult{}, err
	}
	var runAt *time.Time
	if !p.RunAt.IsZero() {
		s.cursors.lower(p.Kind, p.RunAt) // a past run_at: claimable at once (cursor.go)
		runAt = &p.RunAt
	}
	for range maxInsertRetries {
		var (
			res store.InsertResult
			n   int64
		)
		u := scopeOf(p)
		err := q.QueryRow(ctx, s.q.insertOne, [16]byte(p.ID), p.Kind, payloadJSON(p.Payload), meta, p.Priority, runAt,
			micros(p.Delay), p.MaxAttempts, nullable(p.UniqueKey), s.channel,
			u.Global, u.Finished, periodSeconds(u), pkeys.of(0), pkeys.isUnkeyed(0)).Scan((*[16]byte)(&res.ID), &res.Duplicate, &n)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the holder changed under us: try again
		}
		return res, err
	}
	return store.InsertResult{}, errHolderVanished
}

// insertMany runs in a transaction.
func (s *Store) insertMany(ctx context.Context, tx querier, params []store.InsertParams) ([]store.InsertResult, error) {
	// now() is the transaction's start, from which delays count (as in
	// insertOne); clock is the store clock at this call, which places the
	// keys with a Period in their windows, once for all rows, so that the
	// insert and the holders lookup agree.
	pkeys, err := s.partitionKeys(ctx, tx, params...)
	if err != nil {
		return nil, err
	}
	for i := range params {
		if p := &params[i]; !p.RunAt.IsZero() {
			s.cursors.lower(p.Kind, p.RunAt) // a past run_at: claimable at once (cursor.go)
		}
	}
	now, clock, err := s.refuseHistoryIDs(ctx, tx, params) // and reads the clocks: historyids.go
	if err != nil {
		return nil, err
	}
	res := make([]store.InsertResult, len(params))
	runAt := make([]time.Time, len(params)) // each row's run_at, and so its scheduled_at
	meta := make([][]byte, len(params))
	var plain, keyed []int // indexes into params
	keys := make([]scopedKey, len(params))
	firstOf := map[scopedKey]int{} // unique key in its scope → index of its first row
	dupOf := map[int]int{}         // later row → first row with its key
	for i := range params {
		p := &params[i]
		if p.RunAt.IsZero() {
			runAt[i] = now.Add(p.Delay)
		} else {
			runAt[i] = p.RunAt
		}
		m, err := metadataJSON(p.Metadata)
		if err != nil {
			return nil, err
		}
		meta[i] = m
		res[i].ID = p.ID
		if p.UniqueKey == "" {
			plain = append(plain, i)
			continue
		}
		keys[i] = scopedKeyOf(p, clock)
		if first, seen := firstOf[keys[i]]; seen {
			dupOf[i] = first
			continue
		}
		firstOf[keys[i]] = i
		keyed = append(keyed, i)
	}
	// Insert keyed rows in key order, so that concurrent batches wait on
	// each other's keys in one order and cannot deadlock.
	sort.Slice(keyed, func(a, b int) bool { return keys[keyed[a]].less(keys[keyed[b]]) })
	inserted := make([]bool, len(params))
	if len(plain) > 0 {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "jobs"},
			[]string{"id", "kind", "payload", "metadata", "priority", "run_at", "scheduled_at", "max_attempts", "partition_key", "unkeyed"},
			pgx.CopyFromSlice(len(plain), func(k int) ([]any, error) {
				i := plain[k]
				p := &params[i]
				return []any{[16]byte(p.ID), p.Kind, payloadJSON(p.Payload), meta[i], int16(p.Priority), runAt[i], runAt[i], int32(p.MaxAttempts),
					pkeys.of(i), pkeys.isUnkeyed(i)}, nil
			}))
		if err != nil {
			return nil, fmt.Errorf("copy jobs: %w", err)
		}
		for _, i := range plain {
			inserted[i] = true
		}
	}
	if len(keyed) > 0 {
		if err := s.insertAllKeyed(ctx, tx, params, keys, keyed, rowColumns{runAt, meta, pkeys}, res, inserted); err != nil {
			return nil, err
		}
	}
	for i, first := range dupOf {
		res[i] = store.InsertResult{ID: res[first].ID, Duplicate: true}
	}
	// One notification per kind, with the earliest run_at inserted.
	earliest := map[string]time.Time{}
	for i, ok := range inserted {
		k := params[i].Kind
		if t, seen := earliest[k]; ok && (!seen || runAt[i].Before(t)) {
			earliest[k] = runAt[i]
		}
	}
	if len(earliest) > 0 {
		msgs := make([]string, 0, len(earliest))
		for k, t := range earliest {
			b, err := json.Marshal(notification{Kind: k, RunAt: t})
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, string(b))
		}
		if _, err := tx.Exec(ctx, s.q.notify, s.channel, msgs); err != nil {
			return nil, fmt.Errorf("notify: %w", err)
		}
	}
	return res, nil
}

// insertAllKeyed inserts the rows at indexes keyed, in key order, and
// records their results. A row whose key's holder could not be found (it
// gave the key up between the insert's conflict and the lookup) must be
// inserted again; but the statement's other rows hold their keys, some of
// them after the row's key, and taking a key out of order while another
// insert waits for one this call holds is a deadlock. So the rows go in
// under a savepoint, and a statement that leaves rows to try again is
// rolled back to it, releasing every key it took, and run again whole,
// in order.
func (s *Store) insertAllKeyed(ctx context.Context, tx querier, params []store.InsertParams, keys []scopedKey, keyed []int,
	cols rowColumns, res []store.InsertResult, inserted []bool) error {
	for range maxInsertRetries {
		if _, err := tx.Exec(ctx, `SAVEPOINT ax_insert_keyed`); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		again, err := s.insertKeyed(ctx, tx, params, keys, keyed, cols, res, inserted)
		if err != nil {
			return err
		}
		if len(again) == 0 {
			if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT ax_insert_keyed`); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT ax_insert_keyed; RELEASE SAVEPOINT ax_insert_keyed`); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		for _, i := range keyed {
			inserted[i], res[i] = false, store.InsertResult{ID: params[i].ID}
		}
	}
	return errHolderVanished
}

// insertKeyed inserts the rows at indexes keyed (each with a distinct
// unique key in its scope, keys[i]), records results, and returns the rows
// to try again: duplicates whose holder could not be found because it gave
// the key up meanwhile (cancelled, or finished in a scope that frees it).
func (s *Store) insertKeyed(ctx context.Context, tx querier, params []store.InsertParams, keys []scopedKey, keyed []int,
	cols rowColumns, res []store.InsertResult, inserted []bool) ([]int, error) {
	n := len(keyed)
	ids := make([][16]byte, n)
	kinds := make([]string, n)
	payloads := make([][]byte, n)
	metas := make([][]byte, n)
	prios := make([]int16, n)
	runAts := make([]time.Time, n)
	maxes := make([]int32, n)
	ukeys := make([]string, n)
	globals := make([]bool, n)
	finisheds := make([]bool, n)
	periods := make([]int32, n)
	windows := make([]int64, n)
	pkeys := make([]string, n)
	unkeyed := make([]bool, n)
	for k, i := range keyed {
		p := &params[i]
		ids[k], kinds[k], payloads[k], metas[k] = [16]byte(p.ID), p.Kind, payloadJSON(p.Payload), cols.meta[i]
		prios[k], runAts[k], maxes[k], ukeys[k] = int16(p.Priority), cols.runAt[i], int32(p.MaxAttempts), p.UniqueKey
		globals[k], finisheds[k], periods[k], windows[k] = p.Unique.Global, p.Unique.Finished, keys[i].period, keys[i].window
		pkeys[k], unkeyed[k] = cols.pkeys.of(i), cols.pkeys.isUnkeyed(i)
	}
	rows, _ := tx.Query(ctx, s.q.insertMany, ids, kinds, payloads, metas, prios, runAts, maxes, ukeys,
		globals, finisheds, periods, windows, pkeys, unkeyed)
	got, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	done := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		done[id] = true
	}
	var (
		pending        []int
		spaces, lookup []string
		lookPeriods    []int32
		lookWindows    []int64
	)
	for _, i := range keyed {
		if done[params[i].ID] {
			inserted[i] = true
			continue
		}
		k := keys[i]
		pending = append(pending, i)
		spaces, lookPeriods, lookWindows, lookup = append(spaces, k.space), append(lookPeriods, k.period),
			append(lookWindows, k.window), append(lookup, k.key)
	}
	if len(pending) == 0 {
		return nil, nil
	}
	rows, _ = tx.Query(ctx, s.q.holders, spaces, lookPeriods, lookWindows, lookup)
	holder := map[int]uuid.UUID{} // position in pending → holder
	var (
		pos int64 // 1-based, from WITH ORDINALITY
		id  [16]byte
	)
	_, err = pgx.ForEachRow(rows, []any{&pos, &id}, func() error {
		holder[int(pos-1)] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find unique key holders: %w", err)
	}
	var again []int
	for k, i := range pending {
		h, ok := holder[k]
		if !ok {
			again = append(again, i)
			continue
		}
		res[i] = store.InsertResult{ID: h, Duplicate: true}
	}
	return again, nil
}
