package sqlitestore

import (
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// filterSQL returns the WHERE clause (without the keyword; "1" for a zero
// filter) selecting the jobs f matches, with the semantics of
// store.JobFilter.Matches, and its arguments. f must be valid.
func filterSQL(f *store.JobFilter) (string, []any) {
	var (
		terms []string
		args  []any
	)
	in := func(col string, vals []any) {
		terms = append(terms, col+" IN ("+placeholders(len(vals))+")")
		args = append(args, vals...)
	}
	if len(f.IDs) > 0 {
		vals := make([]any, len(f.IDs))
		for i, id := range f.IDs {
			vals[i] = id[:]
		}
		in("id", vals)
	}
	if len(f.Kinds) > 0 {
		vals := make([]any, len(f.Kinds))
		for i, k := range f.Kinds {
			vals[i] = k
		}
		in("kind", vals)
	}
	if len(f.States) > 0 {
		vals := make([]any, len(f.States))
		for i, s := range f.States {
			vals[i] = string(s)
		}
		in("state", vals)
	}
	if len(f.Priorities) > 0 {
		vals := make([]any, len(f.Priorities))
		for i, p := range f.Priorities {
			vals[i] = p
		}
		in("priority", vals)
	}
	if !f.RunAfter.IsZero() {
		terms = append(terms, "run_at >= ?")
		args = append(args, ceilUS(f.RunAfter))
	}
	if !f.RunBefore.IsZero() {
		terms = append(terms, "run_at < ?")
		args = append(args, ceilUS(f.RunBefore))
	}
	if !f.FinishedAfter.IsZero() || !f.FinishedBefore.IsZero() {
		terms = append(terms, "state IN "+finalSQL+" AND finished_at IS NOT NULL")
	}
	if !f.FinishedAfter.IsZero() {
		terms = append(terms, "finished_at >= ?")
		args = append(args, ceilUS(f.FinishedAfter))
	}
	if !f.FinishedBefore.IsZero() {
		terms = append(terms, "finished_at < ?")
		args = append(args, ceilUS(f.FinishedBefore))
	}
	if f.UniqueKey != "" {
		terms = append(terms, "unique_key = ?")
		args = append(args, f.UniqueKey)
	}
	if f.UniqueKeyPrefix != "" {
		// Bytes, not characters, and no LIKE pattern characters.
		terms = append(terms, "substr(CAST(unique_key AS BLOB), 1, ?) = CAST(? AS BLOB)")
		args = append(args, len(f.UniqueKeyPrefix), f.UniqueKeyPrefix)
	}
	for k, v := range f.Metadata {
		terms = append(terms, "EXISTS (SELECT 1 FROM json_each(jobs.metadata) AS m WHERE m.key = ? AND m.value = ?)")
		args = append(args, k, v)
	}
	if f.ErrorContains != "" {
		terms = append(terms, "EXISTS (SELECT 1 FROM json_each(jobs.errors) AS e WHERE instr(json_extract(e.value, '$.error'), ?) > 0)")
		args = append(args, f.ErrorContains)
	}
	if f.Node != "" {
		terms = append(terms, "owner = ?")
		args = append(args, f.Node)
	}
	if f.Parent != uuid.Nil {
		terms = append(terms, "parent = ?") // jobs_parent
		args = append(args, f.Parent[:])
	}
	if len(terms) == 0 {
		return "1", nil
	}
	return "(" + strings.Join(terms, ") AND (") + ")", args
}

// ceilUS returns the first microsecond at or after t: a stored time (whole
// microseconds) is at or after t exactly when it is at or after ceilUS(t).
func ceilUS(t time.Time) int64 {
	us := t.UnixMicro()
	if fromUS(us).Before(t) {
		us++
	}
	return us
}
