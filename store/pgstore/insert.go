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

// querier is what inserts need of a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
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
// a multi-row INSERT … ON CONFLICT DO NOTHING. Listeners get one
// notification per kind, with the earliest run_at, when it commits. Each
// job's ScheduledAt is the run_at it is inserted with, and its payload is
// stored as the text given (a json column). Rows that
// InsertParams.Validate refuses, or that PostgreSQL refuses as data,
// fail the call with an error wrapping store.ErrInvalidParams.
func (s *Store) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := validateInserts(params); err != nil {
		return nil, err
	}
	if len(params) > 0 && s.flowInserts(ctx, params) { // partitions, sequences, pending bounds: insertflow.go
		return s.insertFlow(ctx, nil, params)
	}
	switch len(params) {
	case 0:
		return []store.InsertResult{}, nil
	case 1:
		res, err := s.insertOne(ctx, s.pool, &params[0])
		if err != nil {
			return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
		}
		return []store.InsertResult{res}, nil
	}
	var res []store.InsertResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.insertMany(ctx, tx, params)
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
	if len(params) > 0 && s.flowInserts(ctx, params) { // partitions, sequences, pending bounds: insertflow.go
		return s.insertFlow(ctx, tx, params)
	}
	var (
		res []store.InsertResult
		err error
	)
	switch len(params) {
	case 0:
		return []store.InsertResult{}, nil
	case 1:
		var r store.InsertResult
		r, err = s.insertOne(ctx, tx, &params[0])
		res = []store.InsertResult{r}
	default:
		res, err = s.insertMany(ctx, tx, params)
	}
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

func (s *Store) insertOne(ctx context.Context, q querier, p *store.InsertParams) (store.InsertResult, error) {
	meta, err := metadataJSON(p.Metadata)
	if err != nil {
		return store.InsertResult{}, err
	}
	var runAt *time.Time
	if !p.RunAt.IsZero() {
		runAt = &p.RunAt
	}
	for range maxInsertRetries {
		var (
			res store.InsertResult
			n   int64
		)
		err := q.QueryRow(ctx, s.q.insertOne, p.ID, p.Kind, payloadJSON(p.Payload), meta, p.Priority, runAt,
			micros(p.Delay), p.MaxAttempts, nullable(p.UniqueKey), s.channel).Scan(&res.ID, &res.Duplicate, &n)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the holder changed under us: try again
		}
		return res, err
	}
	return store.InsertResult{}, errHolderVanished
}

// insertMany runs in a transaction.
func (s *Store) insertMany(ctx context.Context, tx querier, params []store.InsertParams) ([]store.InsertResult, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, err
	}
	res := make([]store.InsertResult, len(params))
	runAt := make([]time.Time, len(params)) // each row's run_at, and so its scheduled_at
	meta := make([][]byte, len(params))
	var plain, keyed []int      // indexes into params
	firstOf := map[string]int{} // unique key → index of its first row
	dupOf := map[int]int{}      // later row → first row with its key
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
		switch first, seen := firstOf[p.UniqueKey]; {
		case p.UniqueKey == "":
			plain = append(plain, i)
		case seen:
			dupOf[i] = first
		default:
			firstOf[p.UniqueKey] = i
			keyed = append(keyed, i)
		}
	}
	// Insert keyed rows in key order, so that concurrent batches wait on
	// each other's keys in one order and cannot deadlock.
	sort.Slice(keyed, func(a, b int) bool { return params[keyed[a]].UniqueKey < params[keyed[b]].UniqueKey })
	inserted := make([]bool, len(params))
	if len(plain) > 0 {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "jobs"},
			[]string{"id", "kind", "payload", "metadata", "priority", "run_at", "scheduled_at", "max_attempts"},
			pgx.CopyFromSlice(len(plain), func(k int) ([]any, error) {
				i := plain[k]
				p := &params[i]
				return []any{p.ID, p.Kind, payloadJSON(p.Payload), meta[i], int16(p.Priority), runAt[i], runAt[i], int32(p.MaxAttempts)}, nil
			}))
		if err != nil {
			return nil, fmt.Errorf("copy jobs: %w", err)
		}
		for _, i := range plain {
			inserted[i] = true
		}
	}
	for attempt := 0; len(keyed) > 0; attempt++ {
		if attempt == maxInsertRetries {
			return nil, errHolderVanished
		}
		var err error
		keyed, err = s.insertKeyed(ctx, tx, params, keyed, runAt, meta, res, inserted)
		if err != nil {
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

// insertKeyed inserts the rows at indexes keyed (each with a distinct unique
// key), records results, and returns the rows to try again: duplicates
// whose holder could not be found because it was cancelled meanwhile.
func (s *Store) insertKeyed(ctx context.Context, tx querier, params []store.InsertParams, keyed []int,
	runAt []time.Time, meta [][]byte, res []store.InsertResult, inserted []bool) ([]int, error) {
	n := len(keyed)
	ids := make([]uuid.UUID, n)
	kinds := make([]string, n)
	payloads := make([][]byte, n)
	metas := make([][]byte, n)
	prios := make([]int16, n)
	runAts := make([]time.Time, n)
	maxes := make([]int32, n)
	keys := make([]string, n)
	for k, i := range keyed {
		p := &params[i]
		ids[k], kinds[k], payloads[k], metas[k] = p.ID, p.Kind, payloadJSON(p.Payload), meta[i]
		prios[k], runAts[k], maxes[k], keys[k] = int16(p.Priority), runAt[i], int32(p.MaxAttempts), p.UniqueKey
	}
	rows, _ := tx.Query(ctx, s.q.insertMany, ids, kinds, payloads, metas, prios, runAts, maxes, keys)
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	done := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		done[id] = true
	}
	var lookup []string
	var pending []int
	for _, i := range keyed {
		if done[params[i].ID] {
			inserted[i] = true
			continue
		}
		lookup = append(lookup, params[i].UniqueKey)
		pending = append(pending, i)
	}
	if len(pending) == 0 {
		return nil, nil
	}
	rows, _ = tx.Query(ctx, s.q.holders, lookup)
	holder := map[string]uuid.UUID{}
	var (
		key string
		id  uuid.UUID
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &id}, func() error {
		holder[key] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find unique key holders: %w", err)
	}
	var again []int
	for _, i := range pending {
		h, ok := holder[params[i].UniqueKey]
		if !ok {
			again = append(again, i)
			continue
		}
		res[i] = store.InsertResult{ID: h, Duplicate: true}
	}
	return again, nil
}
