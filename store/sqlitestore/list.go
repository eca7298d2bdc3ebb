package sqlitestore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/axsched/ax/store"
)

// List returns the jobs matching params, ordered by ID (byte order, which
// for UUIDv7 is creation order): jobs of params.Kind when it is not empty,
// in one of params.States when it is not empty, with an ID after
// params.After, at most params.Limit of them. A nil params, a Limit < 1, an
// unknown state or a kind that is not a storable text fails with an error
// wrapping store.ErrInvalidParams. It walks the ID index from params.After
// and skips the jobs the filters reject.
func (s *Store) List(ctx context.Context, params *store.ListParams) ([]*store.JobRecord, error) {
	if params == nil {
		return nil, fmt.Errorf("list jobs: %w: nil params", store.ErrInvalidParams)
	}
	if params.Limit < 1 {
		return nil, fmt.Errorf("list jobs: %w: limit %d < 1", store.ErrInvalidParams, params.Limit)
	}
	if err := store.CheckText(params.Kind, 0); err != nil {
		return nil, fmt.Errorf("list jobs: %w: kind: %w", store.ErrInvalidParams, err)
	}
	var sb strings.Builder
	args := []any{params.After[:]}
	sb.WriteString(`SELECT ` + jobCols + ` FROM jobs WHERE id > ?`)
	if params.Kind != "" {
		sb.WriteString(` AND kind = ?`)
		args = append(args, params.Kind)
	}
	if len(params.States) > 0 {
		for _, st := range params.States {
			if !st.Valid() {
				return nil, fmt.Errorf("list jobs: %w: unknown state %q", store.ErrInvalidParams, st)
			}
		}
		sb.WriteString(` AND state IN (` + placeholders(len(params.States)) + `)`)
		for _, st := range params.States {
			args = append(args, string(st))
		}
	}
	sb.WriteString(` ORDER BY id LIMIT ?`)
	args = append(args, params.Limit)
	var out []*store.JobRecord
	err := s.read(ctx, false, func(r *rtx) error {
		var err error
		out, err = records(r.queryText(sb.String(), args...))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}

// placeholders returns n comma-separated "?".
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// CountJobs returns the number of jobs of each kind in each state, leaving
// out zero counts, ordered by kind and then by the order of store.States.
// The counts are exact: triggers keep them in the counts table as jobs
// are inserted, change state and are deleted, so the call reads a few rows
// whatever the size of the history.
func (s *Store) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	var out []store.StateCount
	err := s.read(ctx, false, func(r *rtx) error {
		rows, err := r.query(qCounts)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.StateCount
			var st string
			if err := rows.Scan(&c.Kind, &st, &c.Count); err != nil {
				return err
			}
			c.State = store.State(st)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	slices.SortFunc(out, func(a, b store.StateCount) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(stateIndex(a.State), stateIndex(b.State)))
	})
	return out, nil
}

// stateIndex returns s's position in store.States.
func stateIndex(s store.State) int { return slices.Index(store.States, s) }
