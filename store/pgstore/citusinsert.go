package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// citusInsertChunk bounds the rows of one multi-row INSERT
// (citusInsertParams a row, under PostgreSQL's 65,535).
const citusInsertChunk = 1000

// Insert inserts jobs as store.Store requires, in one transaction of the
// coordinator: each job is placed on a shard (slotOfKey for a job with a
// unique key, slotOfID otherwise) and each shard's rows go in one
// multi-row INSERT naming the shard, a statement Citus runs on that shard
// alone. A row whose key is held gets the holder's ID from a lookup on
// the key's shard. Listeners are notified through the coordinator when
// the transaction commits (a notification sent on a worker would reach
// only that worker's listeners). A transaction that writes to two worker
// nodes commits through Citus's two-phase commit.
//
// An ID that exists anywhere in the cluster is refused, each looked for on
// its own shard (refuseTakenIDs): a job with a unique key placed on
// another shard leaves a row in job_ids there.
//
// Follow-ups, sequences and pending bounds (FollowUps, SequenceKey,
// PendingLimit) are features the Citus store does not have: such a row
// fails the call with an error wrapping ErrCitusUnsupported and
// store.ErrInvalidParams.
func (c *CitusStore) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := c.checkInserts(params); err != nil || len(params) == 0 {
		return []store.InsertResult{}, err
	}
	defer c.holdCursors(params)()
	for range maxInsertRetries {
		var res []store.InsertResult
		err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
			var err error
			res, err = c.insertRows(ctx, tx, params)
			return err
		})
		if errors.Is(err, errHolderVanished) {
			continue // a key's holder gave it up meanwhile: again, whole
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
		}
		return res, nil
	}
	return nil, fmt.Errorf("pgstore: insert: %w", errHolderVanished)
}

// InsertTx inserts jobs inside the caller's transaction tx, a transaction
// of the coordinator, with Insert's rules: the jobs exist only if tx
// commits, and listeners are notified only then. A transaction that also
// wrote to another node commits through Citus's two-phase commit. On
// error, tx is left for the caller to roll back.
func (c *CitusStore) InsertTx(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("pgstore: insert: nil transaction: %w", store.ErrInvalidParams)
	}
	if err := c.checkInserts(params); err != nil || len(params) == 0 {
		return []store.InsertResult{}, err
	}
	defer c.holdCursors(params)()
	if err := c.twoPhase(ctx, tx); err != nil {
		return nil, err
	}
	res, err := c.insertRows(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert: %w", invalidData(err))
	}
	return res, nil
}

// checkInserts validates every row and refuses, before anything is sent,
// what the Citus store does not do: follow-ups, sequences, pending bounds,
// and an ID twice in one call (Insert's rows meet the primary key of
// their shards only).
func (c *CitusStore) checkInserts(params []store.InsertParams) error {
	if err := validateInserts(params); err != nil {
		return err
	}
	seen := make(map[uuid.UUID]bool, len(params))
	for i := range params {
		p := &params[i]
		var what string
		switch {
		case len(p.FollowUps) > 0:
			what = "follow-ups"
		case p.SequenceKey != "":
			what = "a sequence key"
		case p.PendingLimit > 0:
			what = "a pending limit"
		case seen[p.ID]:
			return fmt.Errorf("pgstore: insert job %d: job ID %s twice in one call: %w", i, p.ID, store.ErrInvalidParams)
		default:
			seen[p.ID] = true
			continue
		}
		return fmt.Errorf("pgstore: insert job %d: %s: %w (%w)", i, what, ErrCitusUnsupported, store.ErrInvalidParams)
	}
	return nil
}

// holdCursors keeps the kinds' claim cursors of every slot down until the
// function it returns is called, when the rows have committed, and lowers
// them for rows with a past run_at (cursor.go).
func (c *CitusStore) holdCursors(params []store.InsertParams) (release func()) {
	releases := make([]func(), len(c.placed))
	for i, p := range c.placed {
		releases[i] = p.cursors.hold(params)
	}
	c.lowerCursors(params)
	return func() {
		for _, r := range releases {
			r()
		}
	}
}

// lowerCursors lowers the claim cursors of every slot for rows with a
// run_at, which may be past: claimable at once (cursor.go).
func (c *CitusStore) lowerCursors(params []store.InsertParams) {
	for i := range params {
		if p := &params[i]; !p.RunAt.IsZero() {
			for _, s := range c.placed {
				s.cursors.lower(p.Kind, p.RunAt)
			}
		}
	}
}

// twoPhase makes Citus commit tx, a caller's transaction, through its
// two-phase commit, whatever else tx writes (citus_2pc, distribute.sql):
// the caller's writes and the store's are then committed together or
// not at all, a coordinator that fails between the two phases included
// (Citus's recovery completes or rolls back what the workers prepared).
func (c *CitusStore) twoPhase(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, c.s.sql(`UPDATE {schema}.citus_2pc SET n = n WHERE n = -1`)); err != nil {
		return fmt.Errorf("pgstore: ask Citus for a two-phase commit: %w", err)
	}
	return nil
}

// citusRow is one row of a Citus insert, with what insertRows derived.
type citusRow struct {
	i     int // index into params
	slot  int
	key   scopedKey
	runAt time.Time
	meta  []byte
}

func (c *CitusStore) insertRows(ctx context.Context, tx pgx.Tx, params []store.InsertParams) ([]store.InsertResult, error) {
	// now() is the transaction's start, from which delays count; clock,
	// the store clock now, places Period keys in their windows.
	var now, clock time.Time
	if err := tx.QueryRow(ctx, `SELECT now(), statement_timestamp()`).Scan(&now, &clock); err != nil {
		return nil, fmt.Errorf("read the clock: %w", err)
	}
	res := make([]store.InsertResult, len(params))
	rows := make([]citusRow, 0, len(params))
	firstOf := map[scopedKey]int{} // a key in its scope → the index of its first row
	dupOf := map[int]int{}
	for i := range params {
		p := &params[i]
		r := citusRow{i: i, runAt: p.RunAt}
		if p.RunAt.IsZero() {
			r.runAt = now.Add(p.Delay)
		}
		m, err := metadataJSON(p.Metadata)
		if err != nil {
			return nil, err
		}
		r.meta = m
		res[i].ID = p.ID
		if p.UniqueKey != "" {
			r.key = scopedKeyOf(p, clock)
			if first, seen := firstOf[r.key]; seen {
				dupOf[i] = first
				continue
			}
			firstOf[r.key] = i
			r.slot = c.slotOfKey(r.key)
		} else {
			r.slot = c.slotOfID(p.ID)
		}
		rows = append(rows, r)
	}
	if err := c.refuseTakenIDs(ctx, tx, params, rows); err != nil {
		return nil, err
	}
	// Shard by shard, keys in order within each: concurrent inserts wait
	// on each other's keys in one order and cannot deadlock.
	sort.SliceStable(rows, func(a, b int) bool {
		ra, rb := &rows[a], &rows[b]
		if ra.slot != rb.slot {
			return ra.slot < rb.slot
		}
		return ra.key.less(rb.key)
	})
	inserted := make([]bool, len(params))
	for start := 0; start < len(rows); {
		end := start
		for end < len(rows) && rows[end].slot == rows[start].slot && end-start < citusInsertChunk {
			end++
		}
		if err := c.insertOnShard(ctx, tx, params, rows[start:end], res, inserted); err != nil {
			return nil, err
		}
		start = end
	}
	for i, first := range dupOf {
		res[i] = store.InsertResult{ID: res[first].ID, Duplicate: true}
	}
	if err := c.markIDs(ctx, tx, params, rows, inserted); err != nil {
		return nil, err
	}
	return res, c.notifyInserted(ctx, tx, params, rows, inserted)
}

// refuseTakenIDs fails the insert, wrapping store.ErrInvalidParams, when
// a row's ID is taken. Every ID is looked for on its own shard
// (slotOfID): in jobs, the history, and job_ids, which points to a job
// with a unique key that lives on its key's shard; a job with a unique
// key is also looked for on its key's shard. One statement per shard,
// each on that shard. A job_ids row whose job is gone (pruned) is
// deleted.
func (c *CitusStore) refuseTakenIDs(ctx context.Context, tx pgx.Tx, params []store.InsertParams, rows []citusRow) error {
	bySlot := map[int][]uuid.UUID{}
	for _, r := range rows {
		id := params[r.i].ID
		bySlot[r.slot] = append(bySlot[r.slot], id)
		if own := c.slotOfID(id); own != r.slot {
			bySlot[own] = append(bySlot[own], id)
		}
	}
	slots := sortedSlots(bySlot)
	b := &pgx.Batch{}
	for _, slot := range slots {
		b.Queue(c.placed[slot].sql(citusTakenIDsSQL), idBytes(bySlot[slot]))
	}
	type marker struct {
		slot  int
		id    uuid.UUID
		value int32
	}
	var markers []marker
	br := tx.SendBatch(ctx, b)
	for _, slot := range slots {
		rows, _ := br.Query()
		var (
			id     uuid.UUID
			value  int32
			marked bool
			taken  *uuid.UUID
		)
		_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id), &value, &marked}, func() error {
			if marked {
				markers = append(markers, marker{slot, id, value})
			} else if taken == nil {
				taken = &id
			}
			return nil
		})
		if err != nil {
			br.Close()
			return fmt.Errorf("look for the IDs: %w", err)
		}
		if taken != nil {
			br.Close()
			return fmt.Errorf("%w: job ID %s exists", store.ErrInvalidParams, *taken)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	for _, m := range markers {
		js, ok := c.slotByValue[m.value]
		if !ok {
			return fmt.Errorf("job ID %s points to shard %d, no slot of this store", m.id, m.value)
		}
		var exists bool
		if err := tx.QueryRow(ctx, c.placed[js].sql(citusJobExistsSQL), [16]byte(m.id)).Scan(&exists); err != nil {
			return fmt.Errorf("look for the IDs: %w", err)
		}
		if exists {
			return fmt.Errorf("%w: job ID %s exists", store.ErrInvalidParams, m.id)
		}
		if _, err := tx.Exec(ctx, c.placed[m.slot].sql(citusUnmarkSQL), [16]byte(m.id)); err != nil {
			return fmt.Errorf("forget the ID of a pruned job: %w", err)
		}
	}
	return nil
}

// citusTakenIDsSQL returns the IDs $1 that a job of the shard has, in
// jobs or the history, and those job_ids points elsewhere for (with the
// job's shard, marked true): probes by primary key per ID, which no
// statistics turn into a scan of the shard (TestCitusPlansAreLinear).
const citusTakenIDsSQL = `SELECT t.* FROM (SELECT DISTINCT id FROM unnest($1::uuid[]) AS u(id)) x
CROSS JOIN LATERAL (
	SELECT id, 0, false FROM {jobs} WHERE {onshard}id = x.id
	UNION ALL
	SELECT id, 0, false FROM {history} WHERE {onshard}id = x.id
	UNION ALL
	SELECT id, job_shard, true FROM {schema}.job_ids WHERE {onshard}id = x.id
	OFFSET 0
) t`

// citusJobExistsSQL reports whether the shard has the job $1, in jobs or
// the history; citusUnmarkSQL forgets a job_ids row of the shard, and
// citusMarkSQL writes one ($1 the ID, $2 the job's shard).
const (
	citusJobExistsSQL = `SELECT EXISTS (SELECT 1 FROM {jobs} WHERE {onshard}id = $1)
	OR EXISTS (SELECT 1 FROM {history} WHERE {onshard}id = $1)`
	citusUnmarkSQL = `DELETE FROM {schema}.job_ids WHERE {onshard}id = $1`
	citusMarkSQL   = `INSERT INTO {schema}.job_ids (shard, id, job_shard) VALUES ({shard}, $1, $2)`
)

// markIDs writes a job_ids row on its ID's shard for every inserted job
// that lives elsewhere (placed by its unique key), in tx.
func (c *CitusStore) markIDs(ctx context.Context, tx pgx.Tx, params []store.InsertParams, rows []citusRow, inserted []bool) error {
	b := &pgx.Batch{}
	for _, r := range rows {
		id := params[r.i].ID
		if own := c.slotOfID(id); inserted[r.i] && own != r.slot {
			b.Queue(c.placed[own].sql(citusMarkSQL), [16]byte(id), c.placed[r.slot].place.value)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("mark job IDs: %w", invalidData(err))
	}
	return nil
}

// citusInsertCols are the columns a Citus insert writes, shard last
// (written as the slot's literal value, not a parameter).
const citusInsertCols = `id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts, unique_key,
	unique_global, unique_finished, unique_period, unique_window, partition_key, unkeyed, shard`

// citusConflictSQL is the unique index of a distributed schema
// (jobs_unique_scope_idx with shard first: MigrateCitus) as an ON CONFLICT
// target.
var citusConflictSQL = `(shard, ` + uniqueSpaceSQL + `, unique_period, unique_window, unique_key) WHERE ` + uniqueHeldSQL("")

// citusInsertParams is the number of parameters of a row of
// citusInsertSQL.
const citusInsertParams = 13

// citusInsertSQL is the statement inserting n rows on the Store's shard:
// a multi-row INSERT … VALUES whose shard is the slot's literal value, a
// statement Citus routes to the shard (an INSERT … SELECT FROM unnest
// would bring the rows through the coordinator), taking the unique index
// (shard first) as its ON CONFLICT target.
func (s *Store) citusInsertSQL(n int) string {
	var sb strings.Builder
	sb.WriteString(`INSERT INTO ` + s.jobsTable() + ` (` + citusInsertCols + `) VALUES `)
	value := strconv.Itoa(int(s.place.value))
	for k := range n {
		if k > 0 {
			sb.WriteString(", ")
		}
		b := k * citusInsertParams
		fmt.Fprintf(&sb, "($%d::uuid, $%d::text, $%d::json, $%d::jsonb, $%d::smallint, $%d::timestamptz, $%d::timestamptz, $%d::int, "+
			"$%d::text, $%d::boolean, $%d::boolean, $%d::int, $%d::bigint, $%d::text, false, %s)",
			b+1, b+2, b+3, b+4, b+5, b+6, b+6, b+7, b+8, b+9, b+10, b+11, b+12, b+13, value)
	}
	sb.WriteString(` ON CONFLICT ` + citusConflictSQL + ` DO NOTHING RETURNING id`)
	return sb.String()
}

// insertOnShard inserts rows, all of one slot, in one statement on its
// shard, and records their results: a row the unique index refused gets
// its key's holder, looked up on the same shard.
func (c *CitusStore) insertOnShard(ctx context.Context, tx pgx.Tx, params []store.InsertParams, rows []citusRow,
	res []store.InsertResult, inserted []bool) error {
	p := c.placed[rows[0].slot]
	args := make([]any, 0, citusInsertParams*len(rows))
	for _, r := range rows {
		q := &params[r.i]
		u := scopeOf(q)
		args = append(args, [16]byte(q.ID), q.Kind, payloadJSON(q.Payload), r.meta, int16(q.Priority), r.runAt, int32(q.MaxAttempts),
			nullable(q.UniqueKey), u.Global, u.Finished, r.key.period, r.key.window, "")
	}
	got, err := pgx.CollectRows(mustQuery(ctx, tx, p.citusInsertSQL(len(rows)), args...), pgx.RowTo[[16]byte])
	if err != nil {
		return fmt.Errorf("insert jobs: %w", invalidData(err))
	}
	done := make(map[uuid.UUID]bool, len(got))
	for _, id := range got {
		done[id] = true
	}
	var (
		pending      []int
		spaces, keys []string
		periods      []int32
		windows      []int64
	)
	for _, r := range rows {
		if done[params[r.i].ID] {
			inserted[r.i] = true
			continue
		}
		if params[r.i].UniqueKey == "" {
			// No key, no conflict target: a row the INSERT did not return
			// can only be missing if the statement failed.
			return fmt.Errorf("insert jobs: job %s was not inserted", params[r.i].ID)
		}
		pending = append(pending, r.i)
		spaces, periods, windows, keys = append(spaces, r.key.space), append(periods, r.key.period),
			append(windows, r.key.window), append(keys, r.key.key)
	}
	if len(pending) == 0 {
		return nil
	}
	holder := map[int]uuid.UUID{}
	var (
		pos int64
		id  [16]byte
	)
	_, err = pgx.ForEachRow(mustQuery(ctx, tx, p.q.holders, spaces, periods, windows, keys), []any{&pos, &id}, func() error {
		holder[int(pos-1)] = id
		return nil
	})
	if err != nil {
		return fmt.Errorf("find unique key holders: %w", err)
	}
	for k, i := range pending {
		h, ok := holder[k]
		if !ok {
			// The holder gave the key up between the conflict and the
			// lookup: the whole insert runs again (Insert's caller
			// sees a transient failure only after maxInsertRetries).
			return fmt.Errorf("%w (job %d)", errHolderVanished, i)
		}
		res[i] = store.InsertResult{ID: h, Duplicate: true}
	}
	return nil
}

// mustQuery runs a query whose error surfaces when its rows are read.
func mustQuery(ctx context.Context, q querier, sql string, args ...any) pgx.Rows {
	rows, _ := q.Query(ctx, sql, args...)
	return rows
}

// notifyInserted sends, through the coordinator, one notification per kind
// with the earliest run_at inserted: delivered when tx commits.
func (c *CitusStore) notifyInserted(ctx context.Context, tx pgx.Tx, params []store.InsertParams, rows []citusRow, inserted []bool) error {
	earliest := map[string]time.Time{}
	for _, r := range rows {
		if !inserted[r.i] {
			continue
		}
		k := params[r.i].Kind
		if t, seen := earliest[k]; !seen || r.runAt.Before(t) {
			earliest[k] = r.runAt
		}
	}
	return c.notify(ctx, tx, earliest)
}

// notify sends one notification per kind in earliest (the kind's earliest
// run_at) on the coordinator, within q's transaction.
func (c *CitusStore) notify(ctx context.Context, q querier, earliest map[string]time.Time) error {
	msgs := notifications(earliest)
	if len(msgs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, c.s.q.notify, c.s.channel, msgs); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// notifications are the messages of one notification per kind in
// earliest, with the kind's earliest run_at, in kind order.
func notifications(earliest map[string]time.Time) []string {
	msgs := make([]string, 0, len(earliest))
	for k, t := range earliest {
		b, err := json.Marshal(notification{Kind: k, RunAt: t})
		if err != nil {
			continue // a string and a time always marshal
		}
		msgs = append(msgs, string(b))
	}
	sort.Strings(msgs)
	return msgs
}
