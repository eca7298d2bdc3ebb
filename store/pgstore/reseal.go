package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var _ store.Resealer = (*Store)(nil)

// resealSQL rewrites one job's sealed values in table {t} while its
// payload and result are still the old ones, text for text (both are
// json columns, kept byte for byte).
const resealSQL = `UPDATE {t} SET payload = $1::json,
	result = CASE WHEN $2::text IS NULL THEN result ELSE $2::json END,
	metadata = CASE WHEN $3 THEN $4::jsonb ELSE metadata END,
	follow_ups = CASE WHEN $5 THEN $6::json ELSE follow_ups END
WHERE id = $7 AND payload::text = $8 AND result::text IS NOT DISTINCT FROM $9`

// Reseal implements store.Resealer: one pipelined batch, the hot table
// first, then the history (a job is in one of them; one that Archive
// moves meanwhile is reported not applied, and a later pass takes it).
func (s *Store) Reseal(ctx context.Context, rows []store.ResealParams) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: reseal row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(rows))
	if len(rows) == 0 {
		return ok, nil
	}
	var b pgx.Batch
	for _, t := range []string{"{jobs}", "{history}"} {
		q := s.sql(strings.Replace(resealSQL, "{t}", t, 1))
		for i, p := range rows {
			var result, oldResult *string
			if p.OldResult != nil {
				r, o := string(p.Result), string(p.OldResult)
				result, oldResult = &r, &o
			}
			md, err := metadataJSON(p.Metadata)
			if err != nil {
				return nil, fmt.Errorf("pgstore: reseal row %d: metadata: %w", i, err)
			}
			fus, err := encodeFollowUps(p.FollowUps)
			if err != nil {
				return nil, fmt.Errorf("pgstore: reseal row %d: %w", i, err)
			}
			b.Queue(q, string(p.Payload), result, p.Metadata != nil, nullableBytes(md),
				p.FollowUps != nil, nullableBytes(fus), [16]byte(p.ID), string(p.OldPayload), oldResult)
		}
	}
	res := s.pool.SendBatch(ctx, &b)
	for range 2 {
		for i := range rows {
			tag, err := res.Exec()
			if err != nil {
				_ = res.Close()
				return nil, fmt.Errorf("pgstore: reseal: %w", err)
			}
			ok[i] = ok[i] || tag.RowsAffected() == 1
		}
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("pgstore: reseal: %w", err)
	}
	return ok, nil
}

// nullableBytes is b as a text parameter, or NULL for nil.
func nullableBytes(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

var _ store.BatchResealer = (*Store)(nil)

// PendingCompletions implements store.BatchResealer: the templates of
// the batches not completed, by ID, through the batches' primary key.
func (s *Store) PendingCompletions(ctx context.Context, after uuid.UUID, limit int) ([]store.PendingCompletion, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("pgstore: pending completions: limit %d not in [1, %d]: %w", limit, store.MaxListLimit, store.ErrInvalidParams)
	}
	rows, _ := s.pool.Query(ctx, s.sql(`SELECT id, completion, template::text FROM {batches}
WHERE NOT completed AND id > $1 ORDER BY id LIMIT $2`), [16]byte(after), limit)
	out := []store.PendingCompletion{}
	var (
		id, completion uuid.UUID
		text           string
	)
	_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id), (*[16]byte)(&completion), &text}, func() error {
		p, err := decodeCompletion(completion, text)
		if err != nil {
			return fmt.Errorf("batch %s: %w", id, err)
		}
		out = append(out, store.PendingCompletion{Batch: id, Job: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending completions: %w", err)
	}
	return out, nil
}

// decodeCompletion reads a batch's template column.
func decodeCompletion(id uuid.UUID, text string) (store.InsertParams, error) {
	var t template
	if err := json.Unmarshal([]byte(text), &t); err != nil {
		return store.InsertParams{}, fmt.Errorf("decode completion template: %w", err)
	}
	p := t.params()
	p.ID = id
	return p, nil
}

// ResealCompletions implements store.BatchResealer. It reads the
// templates, applies the rows in Go, and writes each changed template
// back, in batch ID order, only while the batch has not completed and
// its template's text is still the one read (the column is json, kept
// byte for byte): a batch that completes, or is re-sealed, meanwhile
// keeps its row, and its rows are reported not applied.
func (s *Store) ResealCompletions(ctx context.Context, rows []store.CompletionResealParams) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i := range rows {
		if err := rows[i].Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: reseal completion row %d: %w", i, err)
		}
	}
	ok := make([]bool, len(rows))
	if len(rows) == 0 {
		return ok, nil
	}
	type pending struct {
		read string // the template's text as read
		tmpl store.InsertParams
		rows []int // the rows applied to tmpl
	}
	ids := make([]uuid.UUID, 0, len(rows))
	for _, p := range rows {
		ids = append(ids, p.Batch)
	}
	byID := map[uuid.UUID]*pending{}
	q, _ := s.pool.Query(ctx, s.sql(`SELECT id, completion, template::text FROM {batches} WHERE id = ANY($1) AND NOT completed`), idBytes(ids))
	var (
		id, completion uuid.UUID
		text           string
	)
	_, err := pgx.ForEachRow(q, []any{(*[16]byte)(&id), (*[16]byte)(&completion), &text}, func() error {
		p, err := decodeCompletion(completion, text)
		if err != nil {
			return fmt.Errorf("batch %s: %w", id, err)
		}
		byID[id] = &pending{read: text, tmpl: p}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: reseal completions: %w", err)
	}
	for i := range rows {
		pd := byID[rows[i].Batch]
		if pd == nil || !rows[i].Holds(&pd.tmpl) {
			continue
		}
		rows[i].Apply(&pd.tmpl)
		pd.rows = append(pd.rows, i)
	}
	var b pgx.Batch
	var queued []*pending
	for _, id := range slices.SortedFunc(maps.Keys(byID), func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) }) {
		pd := byID[id]
		if len(pd.rows) == 0 {
			continue
		}
		enc, err := encodeTemplate(&pd.tmpl)
		if err != nil {
			return nil, fmt.Errorf("pgstore: reseal completion of batch %s: %w: %w", id, store.ErrInvalidParams, err)
		}
		b.Queue(s.sql(`UPDATE {batches} SET template = $1::json WHERE id = $2 AND NOT completed AND template::text = $3`),
			string(enc), [16]byte(id), pd.read)
		queued = append(queued, pd)
	}
	if len(queued) == 0 {
		return ok, nil
	}
	res := s.pool.SendBatch(ctx, &b)
	for _, pd := range queued {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return nil, fmt.Errorf("pgstore: reseal completions: %w", err)
		}
		for _, i := range pd.rows {
			ok[i] = tag.RowsAffected() == 1
		}
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("pgstore: reseal completions: %w", err)
	}
	return ok, nil
}
