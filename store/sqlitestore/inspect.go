package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// ListJobs returns the jobs matching params.Filter (with the semantics of
// store.JobFilter.Matches) that follow the cursor params.After in
// params.Order, at most params.Limit of them; see store.JobInspector.
// JobPage.Next is the last job's ID when another matching job follows,
// zero otherwise. Invalid params fail with an error wrapping
// store.ErrInvalidParams. With params.PreviewBytes the records are in
// brief (store.BriefRecord) and the statement returns only the start of
// each payload, result and latest error (briefCols). It reads a reader
// connection, so it never holds
// up claims, and gives up after 30 seconds; it walks the ID index from the
// cursor and skips the jobs the filter rejects (a filter on IDs reads only
// those jobs), so a selective filter over a long history reads many rows.
func (s *Store) ListJobs(ctx context.Context, params *store.ListJobsParams) (*store.JobPage, error) {
	if params == nil {
		return nil, fmt.Errorf("list jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	where, args := filterSQL(&params.Filter)
	order, cmp := "ASC", ">"
	if params.Order == store.NewestFirst {
		order, cmp = "DESC", "<"
	}
	if params.After != uuid.Nil {
		where += " AND id " + cmp + " ?"
		args = append(args, params.After[:])
	}
	cols := jobCols
	if params.PreviewBytes > 0 {
		cols = briefCols
		// briefCols has its three ? first.
		args = append([]any{params.PreviewBytes, params.PreviewBytes, params.PreviewBytes}, args...)
	}
	args = append(args, params.Limit+1)
	text := `SELECT ` + cols + ` FROM jobs WHERE ` + where + ` ORDER BY id ` + order + ` LIMIT ?`
	page := &store.JobPage{}
	err := s.read(ctx, false, func(r *rtx) error {
		var err error
		if params.PreviewBytes > 0 {
			var rows *sql.Rows
			if rows, err = r.queryText(text, args...); err == nil {
				page.Jobs, err = briefs(rows, params.PreviewBytes)
			}
		} else {
			page.Jobs, err = records(r.queryText(text, args...))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	if len(page.Jobs) > params.Limit {
		page.Jobs = page.Jobs[:params.Limit]
		page.Next = page.Jobs[len(page.Jobs)-1].ID
	}
	return page, nil
}

// CountMatching returns how many jobs match f, exactly; see
// store.JobInspector. A filter on kinds and states alone (or none) is
// answered from the counts the triggers keep; any other counts the
// matching rows. An invalid filter fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) CountMatching(ctx context.Context, f *store.JobFilter) (int64, error) {
	if f == nil {
		return 0, fmt.Errorf("count jobs: %w: nil filter", store.ErrInvalidParams)
	}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	var n int64
	err := s.read(ctx, false, func(r *rtx) error {
		g := *f
		g.Kinds, g.States = nil, nil
		if g.IsZero() {
			where, args := "n <> 0", []any(nil)
			if len(f.Kinds) > 0 {
				kinds := uniq(f.Kinds)
				where += " AND kind IN (" + placeholders(len(kinds)) + ")"
				for _, k := range kinds {
					args = append(args, k)
				}
			}
			if len(f.States) > 0 {
				states := uniq(f.States)
				where += " AND state IN (" + placeholders(len(states)) + ")"
				for _, st := range states {
					args = append(args, string(st))
				}
			}
			rows, err := r.queryText(`SELECT coalesce(sum(n), 0) FROM counts WHERE `+where, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			rows.Next()
			if err := rows.Scan(&n); err != nil {
				return err
			}
			return rows.Close()
		}
		where, args := filterSQL(f)
		rows, err := r.queryText(`SELECT count(*) FROM jobs WHERE `+where, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		rows.Next()
		if err := rows.Scan(&n); err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// uniq returns vs without repeats, in first-seen order.
func uniq[T comparable](vs []T) []T {
	seen := make(map[T]bool, len(vs))
	var out []T
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// OldestDue returns, per kind, the earliest run_at of its scheduled and
// retrying jobs due at the store's now; see store.DueInspector. The kinds
// with claimable jobs come from the counts table, then one probe of the
// jobs_claim index per kind and priority: O(kinds · log n), whatever the
// backlog.
func (s *Store) OldestDue(ctx context.Context) (*store.DueReport, error) {
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("oldest due jobs: %w", err)
	}
	rep := &store.DueReport{Now: s.clock()}
	now := toUS(rep.Now)
	err := s.read(ctx, true, func(r *rtx) error {
		rows, err := r.query(qDueKinds)
		if err != nil {
			return err
		}
		var kinds []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			kinds = append(kinds, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range kinds {
			var oldest int64
			found := false
			for _, prio := range store.Priorities {
				var at int64
				err := r.queryRow(qClaimNext, k, prio).Scan(&at)
				if isNoRows(err) {
					continue
				}
				if err != nil {
					return err
				}
				if at <= now && (!found || at < oldest) {
					oldest, found = at, true
				}
			}
			if found {
				rep.Kinds = append(rep.Kinds, store.KindDue{Kind: k, OldestRunAt: fromUS(oldest)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("oldest due jobs: %w", err)
	}
	return rep, nil
}

// briefCols are what a listing in brief reads of each row: jobCols with
// payload, result and follow_ups NULL and errors only the latest, its text
// cut to ? characters, then the starts (? characters) and byte sizes of
// payload and result and the counts of errors and follow-ups. Its three ?
// come before the WHERE clause's. substr cuts characters, which are at
// least as many bytes: briefs cuts the rest.
var briefCols = strings.NewReplacer(
	" payload,", " NULL,",
	" errors,", ` CASE WHEN errors IS NULL OR json_array_length(errors) = 0 THEN NULL
	ELSE json_array(json_set(json_extract(errors, '$[#-1]'), '$.error', substr(coalesce(json_extract(errors, '$[#-1].error'), ''), 1, ?))) END,`,
	" result,", " NULL,",
	" follow_ups,", " NULL,",
).Replace(jobCols) + `,
	substr(payload, 1, ?), length(CAST(payload AS BLOB)), substr(result, 1, ?), coalesce(length(CAST(result AS BLOB)), 0),
	coalesce(json_array_length(errors), 0), coalesce(json_array_length(follow_ups), 0)`

// withExtra scans a row's first columns with scanJob and the rest into
// extra.
type withExtra struct {
	sc    scanner
	extra []any
}

func (w withExtra) Scan(dest ...any) error { return w.sc.Scan(append(dest, w.extra...)...) }

// briefs reads the records in brief rows of briefCols return, cutting the
// texts to n bytes (store.CutText).
func briefs(rows *sql.Rows, n int) ([]*store.JobRecord, error) {
	defer rows.Close()
	var out []*store.JobRecord
	for rows.Next() {
		var (
			payload, result                   sql.NullString
			b                                 store.Brief
			payloadSize, resultSize, errs, fu int64
		)
		j, err := scanJob(withExtra{rows, []any{&payload, &payloadSize, &result, &resultSize, &errs, &fu}})
		if err != nil {
			return nil, err
		}
		rec, err := j.record()
		if err != nil {
			return nil, err
		}
		b.Payload, b.PayloadSize = store.CutText(payload.String, n), int(payloadSize)
		b.Result, b.ResultSize = store.CutText(result.String, n), int(resultSize)
		b.Errors, b.FollowUps = int(errs), int(fu)
		for i := range rec.Errors {
			rec.Errors[i].Error = store.CutText(rec.Errors[i].Error, n)
		}
		rec.Payload, rec.Result, rec.FollowUps, rec.Brief = nil, nil, nil, &b
		out = append(out, rec)
	}
	return out, rows.Err()
}
