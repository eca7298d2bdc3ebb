package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.JobInspector = (*Store)(nil)

// inspectTimeout bounds each statement of ListJobs and CountMatching
// (statement_timeout), so that a filter no index serves (an error text, a
// node) over a long history gives up rather than load the server.
const inspectTimeout = 30 * time.Second

// maxListBranches bounds the branches of a listing: one per (state, kind)
// pair when both are filtered, so each branch walks one range of a list
// index. Beyond it, the kinds go into one ANY term instead.
const maxListBranches = 64

// ListJobs returns the page of jobs matching params.Filter (with the
// semantics of store.JobFilter.Matches) that follows the cursor
// params.After in params.Order; see store.JobInspector. JobPage.Next is
// the last job's ID when another matching job follows (the statement reads
// one job more than the page), zero otherwise. Invalid params fail with an
// error wrapping store.ErrInvalidParams.
//
// It runs in a read-only transaction whose statements give up after 30
// seconds; it takes no lock a claim or finish waits for. Jobs are ordered
// by ID (UUIDv7: creation order). A filter on states is split into one
// branch per state (and per kind, when kinds are filtered too), each
// walking its range of an index in ID order from the cursor and stopping
// after the page; the branches are merged. Dead and cancelled jobs have
// the partial indexes jobs_failed_list_idx (state, id) and
// jobs_failed_kind_list_idx (kind, state, id); other states (succeeded
// jobs, most of the table; live jobs, few) and filters without states
// walk the primary key and skip the jobs the filter rejects, which is
// quick while matching jobs are common among recent ones, and bounded by
// the timeout otherwise.
func (s *Store) ListJobs(ctx context.Context, params *store.ListJobsParams) (*store.JobPage, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("pgstore: list jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: list jobs: %w", err)
	}
	q, args, err := s.listSQL(params)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list jobs: %w", err)
	}
	page := &store.JobPage{}
	err = s.inspect(ctx, true, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, q, args...)
		if params.PreviewBytes > 0 {
			page.Jobs, err = collectBriefs(rows, params.PreviewBytes)
		} else {
			page.Jobs, err = collectJobs(rows)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: list jobs: %w", err)
	}
	if len(page.Jobs) > params.Limit {
		page.Jobs = page.Jobs[:params.Limit]
		page.Next = page.Jobs[len(page.Jobs)-1].ID
	}
	return page, nil
}

// listSQL builds the listing statement of params (valid) and its
// arguments.
func (s *Store) listSQL(params *store.ListJobsParams) (string, []any, error) {
	f := &params.Filter
	states := listStates(f)
	kinds := slices.Compact(slices.Sorted(slices.Values(f.Kinds)))
	branchKinds := len(states) > 0 && len(kinds) > 0 && len(states)*len(kinds) <= maxListBranches

	var a sqlArgs
	common, err := filterTerms(f, &a, filterParts{noStates: len(states) > 0, noKinds: branchKinds})
	if err != nil {
		return "", nil, err
	}
	order, cmp := "DESC", "<"
	if params.Order == store.OldestFirst {
		order, cmp = "ASC", ">"
	}
	if params.After != uuid.Nil {
		common = append(common, "id "+cmp+" "+a.add([16]byte(params.After)))
	}
	limit := a.add(params.Limit + 1)
	tail := " ORDER BY id " + order + " LIMIT " + limit
	sel := "SELECT " + jobColumns + " FROM " + s.allJobsTable() + " WHERE "
	if len(states) == 0 {
		return briefSQL(params, &a, order, sel+whereSQL(common)+tail), a, nil
	}
	var branches []string
	for _, st := range states {
		terms := append(slices.Clip(common), "state = "+stateLiteral(st))
		if !branchKinds {
			branches = append(branches, sel+whereSQL(terms)+tail)
			continue
		}
		for _, k := range kinds {
			kt := append(slices.Clip(terms), "kind = "+a.add(k))
			branches = append(branches, sel+whereSQL(kt)+tail)
		}
	}
	if len(branches) == 1 {
		return briefSQL(params, &a, order, branches[0]), a, nil
	}
	q := "SELECT * FROM ((" + strings.Join(branches, ")\nUNION ALL\n(") + ")) AS u" + tail
	return briefSQL(params, &a, order, q), a, nil
}

// briefSQL returns q, a listing of jobColumns in order, as it is to be
// sent: q itself, or for a listing in brief (params.PreviewBytes) q
// wrapped in a statement that returns briefColumns instead. The wrapper
// reads each row's payload and result once (the LATERAL subquery, which
// OFFSET 0 keeps from being inlined into each use), and sends the start
// of each, their sizes, the latest error cut and the counts of errors
// and follow-ups. The values still pass through the server whole (a
// jsonb payload is converted to text to be cut), but never to the
// client.
func briefSQL(params *store.ListJobsParams, a *sqlArgs, order, q string) string {
	if params.PreviewBytes == 0 {
		return q
	}
	n := a.add(params.PreviewBytes)
	cols := strings.NewReplacer("$n", n+"::integer").Replace(briefColumns)
	return "SELECT " + cols + " FROM (" + q + ") AS b CROSS JOIN LATERAL (SELECT b.payload::text AS pt, b.result::text AS rt, b.errors->-1 AS le OFFSET 0) AS x ORDER BY b.id " + order
}

// briefColumns are what a listing in brief reads of each row: jobColumns
// (prefixed by b) with payload, result and follow_ups NULL and errors only
// the latest, its text cut to $n characters, then the starts and sizes of
// payload and result and the counts of errors and follow-ups (briefScan).
// left cuts characters, which are at least as many bytes: the scan cuts
// the rest.
var briefColumns = func() string {
	swap := map[string]string{
		"payload":    "NULL::jsonb",
		"result":     "NULL::json",
		"follow_ups": "NULL::json",
		"errors": `CASE WHEN x.le IS NULL THEN '[]'::jsonb
	ELSE jsonb_build_array(jsonb_set(x.le, '{error}', to_jsonb(coalesce(left(x.le->>'error', $n), '')))) END`,
	}
	cols := strings.Split(jobColumns, ",")
	for i, c := range cols {
		c = strings.TrimSpace(c)
		if e, ok := swap[c]; ok {
			cols[i] = e
		} else {
			cols[i] = "b." + c
		}
	}
	return strings.Join(cols, ", ") + `,
	left(x.pt, $n), coalesce(octet_length(x.pt), 0), left(x.rt, $n), coalesce(octet_length(x.rt), 0),
	jsonb_array_length(b.errors), coalesce(json_array_length(b.follow_ups), 0)`
}()

// briefScan holds the columns briefColumns adds after jobColumns.
type briefScan struct {
	payload, result       *string
	payloadSize, resSize  int32
	errors, followUpCount int32
}

// collectBriefs scans rows of briefColumns into records in brief, cutting
// the texts to n bytes (store.CutText), and closes rows.
func collectBriefs(rows pgx.Rows, n int) ([]*store.JobRecord, error) {
	defer rows.Close()
	var jobs []*store.JobRecord
	for rows.Next() {
		var js jobScan
		var bs briefScan
		dest := append(js.dest(), &bs.payload, &bs.payloadSize, &bs.result, &bs.resSize, &bs.errors, &bs.followUpCount)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j, err := js.record()
		if err != nil {
			return nil, err
		}
		b := &store.Brief{PayloadSize: int(bs.payloadSize), ResultSize: int(bs.resSize),
			Errors: int(bs.errors), FollowUps: int(bs.followUpCount)}
		if bs.payload != nil {
			b.Payload = store.CutText(*bs.payload, n)
		}
		if bs.result != nil {
			b.Result = store.CutText(*bs.result, n)
		}
		for i := range j.Errors {
			j.Errors[i].Error = store.CutText(j.Errors[i].Error, n)
		}
		j.Payload, j.Result, j.FollowUps, j.Brief = nil, nil, nil, b
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// listStates returns the states a listing of f branches on, in the order
// of store.States: the filtered states (only final ones when a finish time
// is filtered too), or the final states when only a finish time is.
func listStates(f *store.JobFilter) []store.State {
	finished := !f.FinishedAfter.IsZero() || !f.FinishedBefore.IsZero()
	var out []store.State
	for _, st := range store.States {
		switch {
		case len(f.States) > 0 && !slices.Contains(f.States, st):
		case finished && !st.Final():
		default:
			out = append(out, st)
		}
	}
	if len(f.States) == 0 && !finished {
		return nil
	}
	// Empty when the filter excludes every state (only live states, with
	// a finish time): then the plain statement, whose terms keep both
	// conditions, matches nothing.
	return out
}

// CountMatching returns how many jobs match f, exactly, counting them in
// one statement in a read-only transaction that gives up after 30
// seconds; see store.JobInspector. A count over final states can be
// answered from the partial list indexes. An invalid filter fails with an
// error wrapping store.ErrInvalidParams.
func (s *Store) CountMatching(ctx context.Context, f *store.JobFilter) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if f == nil {
		return 0, fmt.Errorf("pgstore: count jobs: %w: nil filter", store.ErrInvalidParams)
	}
	if err := f.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	var a sqlArgs
	terms, err := filterTerms(f, &a, filterParts{})
	if err != nil {
		return 0, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	var n int64
	err = s.inspect(ctx, false, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM "+s.allJobsTable()+" WHERE "+whereSQL(terms), a...).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	return n, nil
}

// inspect runs fn in a read-only transaction whose statements give up
// after inspectTimeout. Reads take no row locks, so claims and finishes
// never wait for them; the timeout keeps a slow filter from holding a
// connection and a snapshot (which would delay vacuum) for long. serial
// turns parallel query off: a page reads about a hundred rows, and
// starting parallel workers, which the planner picks for a filtered walk
// of a large primary key, costs 20 ms where the walk takes 0.3 ms (10M
// rows, TestListOnLargeHistory).
func (s *Store) inspect(ctx context.Context, serial bool, fn func(tx pgx.Tx) error) error {
	workers := "-1" // keep the server's setting
	if serial {
		workers = "0"
	}
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true),
	CASE WHEN $2 = '-1' THEN NULL ELSE set_config('max_parallel_workers_per_gather', $2, true) END`,
			fmt.Sprint(inspectTimeout.Milliseconds()), workers)
		if err != nil {
			return err
		}
		return fn(tx)
	})
}

// jobsTable returns the schema-qualified, quoted jobs table.
func (s *Store) jobsTable() string { return pgx.Identifier{s.schema, "jobs"}.Sanitize() }
