package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.DeadGrouper = (*Store)(nil)

// DeadGroups counts the dead jobs params selects by kind and
// store.DeadErrorLine in one statement over live and archived jobs, in a
// read-only transaction that gives up after 30 seconds (inspect); see
// store.DeadGrouper. The dead jobs are found through the partial list
// indexes of failed jobs; each one's latest error is read (the line is
// computed in SQL as DeadErrorLine does: split_part, btrim of the same
// characters, left in characters), so the cost grows with the number of
// dead jobs, which pruning bounds.
func (s *Store) DeadGroups(ctx context.Context, params *store.DeadGroupsParams) (*store.DeadGroupReport, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("pgstore: dead groups: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: dead groups: %w", err)
	}
	q, a, err := s.deadGroupsSQL(params)
	if err != nil {
		return nil, fmt.Errorf("pgstore: dead groups: %w", err)
	}
	rep := &store.DeadGroupReport{}
	err = s.inspect(ctx, false, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, q, a...)
		defer rows.Close()
		rep.Groups = rep.Groups[:0]
		for rows.Next() {
			var g store.DeadGroup
			var total, jobs int64
			if err := rows.Scan(&g.Kind, &g.Error, &g.Count, &g.Newest, (*[16]byte)(&g.Sample), &total, &jobs); err != nil {
				return err
			}
			rep.Groups = append(rep.Groups, g)
			rep.Total, rep.Jobs = int(total), jobs
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: dead groups: %w", err)
	}
	return rep, nil
}

// deadGroupsSQL builds DeadGroups' statement for params (valid) and its
// arguments.
func (s *Store) deadGroupsSQL(params *store.DeadGroupsParams) (string, sqlArgs, error) {
	var a sqlArgs
	f := store.JobFilter{States: []store.State{store.StateDead}, Kinds: params.Kinds,
		FinishedAfter: params.DiedAfter, FinishedBefore: params.DiedBefore}
	terms, err := filterTerms(&f, &a, filterParts{})
	if err != nil {
		return "", nil, err
	}
	if len(params.ExceptKinds) > 0 {
		terms = append(terms, "NOT (kind = ANY("+a.add(params.ExceptKinds)+"::text[]))")
	}
	q := `SELECT kind, line, count(*), max(finished_at), max(id::text)::uuid,
	count(*) OVER (), sum(count(*)) OVER ()
FROM (SELECT kind, finished_at, id,
	left(btrim(split_part(coalesce(errors->-1->>'error', ''), chr(10), 1), ' ' || chr(9) || chr(13) || chr(11) || chr(12)), ` +
		fmt.Sprint(store.DeadErrorLineRunes) + `) AS line
	FROM ` + s.allJobsTable() + ` WHERE ` + whereSQL(terms) + `) AS d
GROUP BY kind, line
ORDER BY count(*) DESC, kind COLLATE "C", line COLLATE "C"
LIMIT ` + a.add(params.Limit)
	return q, a, nil
}
