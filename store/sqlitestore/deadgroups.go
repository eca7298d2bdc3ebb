package sqlitestore

import (
	"context"
	"fmt"

	"github.com/axsched/ax/store"
)

var _ store.DeadGrouper = (*Store)(nil)

// DeadGroups counts the dead jobs params selects by kind and
// store.DeadErrorLine in one statement on a reader connection; see
// store.DeadGrouper. The line is computed in SQL as DeadErrorLine does
// (the first line, trimmed of the same characters, substr in
// characters), so each dead job's latest error is read.
func (s *Store) DeadGroups(ctx context.Context, params *store.DeadGroupsParams) (*store.DeadGroupReport, error) {
	if params == nil {
		return nil, fmt.Errorf("dead groups: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("dead groups: %w", err)
	}
	f := store.JobFilter{States: []store.State{store.StateDead}, Kinds: params.Kinds,
		FinishedAfter: params.DiedAfter, FinishedBefore: params.DiedBefore}
	where, args := filterSQL(&f)
	if len(params.ExceptKinds) > 0 {
		where += " AND kind NOT IN (" + placeholders(len(params.ExceptKinds)) + ")"
		for _, k := range params.ExceptKinds {
			args = append(args, k)
		}
	}
	args = append(args, params.Limit)
	q := `SELECT kind, line, count(*), max(finished_at), max(id), count(*) OVER (), sum(count(*)) OVER ()
FROM (SELECT kind, finished_at, id,
	substr(trim(CASE WHEN instr(e, char(10)) > 0 THEN substr(e, 1, instr(e, char(10)) - 1) ELSE e END,
		char(32, 9, 13, 11, 12)), 1, ` + fmt.Sprint(store.DeadErrorLineRunes) + `) AS line
	FROM (SELECT kind, finished_at, id, coalesce(json_extract(errors, '$[#-1].error'), '') AS e FROM jobs WHERE ` + where + `))
GROUP BY kind, line
ORDER BY count(*) DESC, kind, line
LIMIT ?`
	rep := &store.DeadGroupReport{}
	err := s.read(ctx, false, func(r *rtx) error {
		rows, err := r.queryText(q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		rep.Groups = rep.Groups[:0]
		for rows.Next() {
			var (
				g            store.DeadGroup
				newest       int64
				id           []byte
				total, count int64
			)
			if err := rows.Scan(&g.Kind, &g.Error, &g.Count, &newest, &id, &total, &count); err != nil {
				return err
			}
			g.Newest = fromUS(newest)
			if g.Sample, err = idFrom(id); err != nil {
				return err
			}
			rep.Groups = append(rep.Groups, g)
			rep.Total, rep.Jobs = int(total), count
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("dead groups: %w", err)
	}
	return rep, nil
}
