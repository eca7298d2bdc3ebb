package pgstore

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// sqlArgs collects the arguments of a statement being built and names
// them $1, $2, ….
type sqlArgs []any

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// stateLiteral returns st as an SQL literal. States are written into the
// statement rather than sent as parameters so that the planner, even with a
// generic plan, can prove that a filter on final states implies the
// predicate of the partial list indexes. st must be valid (one of
// store.States, none of which needs quoting).
func stateLiteral(st store.State) string { return "'" + string(st) + "'" }

// statesSQL returns the parenthesized list of the states' literals.
func statesSQL(states []store.State) string {
	lits := make([]string, len(states))
	for i, st := range states {
		lits[i] = stateLiteral(st)
	}
	return "(" + strings.Join(lits, ", ") + ")"
}

// filterParts tells filterTerms which fields the caller writes itself
// (the branches of a listing select one state and one kind each).
type filterParts struct {
	noStates bool
	noKinds  bool
}

// filterTerms returns the SQL terms (to be joined with AND) selecting the
// jobs f matches, with the semantics of store.JobFilter.Matches, adding
// their arguments to a. f must be valid (JobFilter.Validate).
func filterTerms(f *store.JobFilter, a *sqlArgs, parts filterParts) ([]string, error) {
	var terms []string
	if len(f.IDs) > 0 {
		terms = append(terms, "id = ANY("+a.add(idBytes(f.IDs))+"::uuid[])")
	}
	switch {
	case parts.noKinds:
	case len(f.Kinds) == 1:
		// An equality, not ANY: the planner can then walk an index on
		// (kind, state, id) in ID order.
		terms = append(terms, "kind = "+a.add(f.Kinds[0]))
	case len(f.Kinds) > 1:
		terms = append(terms, "kind = ANY("+a.add(f.Kinds)+"::text[])")
	}
	if len(f.States) > 0 && !parts.noStates {
		terms = append(terms, "state IN "+statesSQL(f.States))
	}
	if len(f.Priorities) > 0 {
		prios := make([]int32, len(f.Priorities))
		for i, p := range f.Priorities {
			prios[i] = int32(p)
		}
		terms = append(terms, "priority = ANY("+a.add(prios)+"::int[])")
	}
	if !f.RunAfter.IsZero() {
		terms = append(terms, "run_at >= "+a.add(ceilMicro(f.RunAfter)))
	}
	if !f.RunBefore.IsZero() {
		terms = append(terms, "run_at < "+a.add(ceilMicro(f.RunBefore)))
	}
	if !f.FinishedAfter.IsZero() || !f.FinishedBefore.IsZero() {
		if !parts.noStates {
			terms = append(terms, "state IN "+finalSQL)
		}
		terms = append(terms, "finished_at IS NOT NULL")
	}
	if !f.FinishedAfter.IsZero() {
		terms = append(terms, "finished_at >= "+a.add(ceilMicro(f.FinishedAfter)))
	}
	if !f.FinishedBefore.IsZero() {
		terms = append(terms, "finished_at < "+a.add(ceilMicro(f.FinishedBefore)))
	}
	if f.UniqueKey != "" {
		terms = append(terms, "unique_key = "+a.add(f.UniqueKey))
	}
	if f.UniqueKeyPrefix != "" {
		// LIKE, with its metacharacters escaped, rather than starts_with:
		// a btree index with text_pattern_ops could serve it.
		terms = append(terms, "unique_key LIKE "+a.add(likePrefix(f.UniqueKeyPrefix))+` ESCAPE '\'`)
	}
	if len(f.Metadata) > 0 {
		md, err := json.Marshal(f.Metadata)
		if err != nil {
			return nil, err
		}
		terms = append(terms, "metadata @> "+a.add(string(md))+"::jsonb")
	}
	if f.ErrorContains != "" {
		// strpos, not LIKE: the text is matched literally, case-sensitive.
		terms = append(terms, "EXISTS (SELECT 1 FROM jsonb_array_elements(errors) AS e WHERE strpos(e->>'error', "+
			a.add(f.ErrorContains)+") > 0)")
	}
	if f.Node != "" {
		terms = append(terms, "owner = "+a.add(f.Node))
	}
	if f.Parent != uuid.Nil {
		terms = append(terms, "parent = "+a.add([16]byte(f.Parent))+"::uuid") // jobs_parent_idx
	}
	return terms, nil
}

// likePrefix returns a LIKE pattern (escape character \) matching the
// texts that start with prefix.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}

// ceilMicro returns the first microsecond at or after t. PostgreSQL keeps
// microseconds, so a stored time is at or after t exactly when it is at or
// after ceilMicro(t) (and before t exactly when before ceilMicro(t));
// sending t itself would let the driver truncate it.
func ceilMicro(t time.Time) time.Time {
	c := t.Truncate(time.Microsecond)
	if c.Before(t) {
		c = c.Add(time.Microsecond)
	}
	return c
}

// whereSQL joins terms with AND; no terms select every row.
func whereSQL(terms []string) string {
	if len(terms) == 0 {
		return "true"
	}
	return "(" + strings.Join(terms, ") AND (") + ")"
}

// replaceTable substitutes the schema-qualified, quoted table for
// placeholder in q.
func replaceTable(q, placeholder, schema, table string) string {
	return strings.ReplaceAll(q, placeholder, pgx.Identifier{schema, table}.Sanitize())
}
