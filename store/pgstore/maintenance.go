package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// RescueExpired takes back at most limit running jobs whose lease expired,
// oldest expiry first, in one statement (locking with SKIP LOCKED, so
// concurrent rescuers and late Finish calls never wait on each other): to
// retrying, due now, while attempts remain, otherwise to dead, appending a
// "lease expired" error. A job whose cancel was requested becomes cancelled
// instead, and one whose pause was requested paused (due now) while
// attempts remain, as Finish would have made them. It returns each rescued
// job with the owner and attempt its lease was cut short on and the state
// it went to. Jobs made retrying notify listeners. limit must be > 0.
func (s *Store) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("pgstore: rescue: limit %d < 1: %w", limit, store.ErrInvalidParams)
	}
	// The rescue scans jobs_busy_idx as a plain index scan (rescueScanSQL),
	// in the same round trip: the two statements share the batch's
	// implicit transaction.
	b := &pgx.Batch{}
	b.Queue(rescueScanSQL)
	b.Queue(s.q.rescue, limit, s.channel)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("pgstore: rescue expired leases: settings: %w", err)
	}
	rows, _ := br.Query()
	var (
		r     store.Rescued
		state string
		out   []store.Rescued
	)
	_, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&r.ID), &r.Kind, &r.Owner, &r.Attempt, &state}, func() error {
		r.State = store.State(state)
		out = append(out, r)
		return nil
	})
	if err == nil {
		err = br.Close() // the commit: only its end says the leases were taken
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: rescue expired leases: %w", err)
	}
	s.flowRescued(ctx, out) // slots and probes freed: flow.go
	return out, nil
}

// Prune deletes final jobs that finished more than params.Retention ago,
// oldest first, and returns how many. In jobs (not yet archived, or
// keeping their unique key) it deletes up to params.Limit in one bounded
// statement through the jobs_finished_idx and jobs_kept_idx partial
// indexes. In jobs_history it drops every day partition wholly past the
// retention (counting its jobs, so the result can exceed params.Limit),
// then deletes up to params.Limit jobs of the partition the boundary falls
// in. Call it repeatedly until it returns less than the limit to drain a
// backlog in small transactions.
func (s *Store) Prune(ctx context.Context, params *store.PruneParams) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if params == nil || params.Limit < 1 || params.Retention < 0 {
		return 0, fmt.Errorf("pgstore: prune: limit must be > 0 and retention >= 0: %w", store.ErrInvalidParams)
	}
	tag, err := s.pool.Exec(ctx, s.q.prune, micros(params.Retention), params.Limit)
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune: %w", err)
	}
	if err := s.prunePartBreakers(ctx); err != nil {
		return int(tag.RowsAffected()), fmt.Errorf("pgstore: prune: %w", err)
	}
	n, err := s.pruneHistory(ctx, params.Retention, params.Limit)
	n += int(tag.RowsAffected())
	if err != nil {
		return n, fmt.Errorf("pgstore: prune history: %w", err)
	}
	return n, nil
}

// List returns up to params.Limit jobs matching params, ordered by ID
// (keyset paging: pass the last ID as After for the next page). A kind
// PostgreSQL refuses as text fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) List(ctx context.Context, params *store.ListParams) ([]*store.JobRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if params == nil || params.Limit < 1 {
		return nil, fmt.Errorf("pgstore: list: limit must be > 0: %w", store.ErrInvalidParams)
	}
	states := make([]string, len(params.States))
	for i, st := range params.States {
		if !st.Valid() {
			return nil, fmt.Errorf("pgstore: list: unknown state %q: %w", st, store.ErrInvalidParams)
		}
		states[i] = string(st)
	}
	rows, _ := s.pool.Query(ctx, s.q.list, params.Kind, states, [16]byte(params.After), params.Limit)
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", invalidData(err))
	}
	if jobs == nil {
		jobs = []*store.JobRecord{}
	}
	return jobs, nil
}

// exactFinalLimit is the number of final jobs up to which CountJobs counts
// them exactly.
const exactFinalLimit = 10000

// sampleRows is about how many rows CountJobs samples to estimate final
// counts above exactFinalLimit.
const sampleRows = 20000

// assumedRowsPerPage is the heap density CountJobs assumes to size its
// sample where the planner has not measured one (never analyzed).
const assumedRowsPerPage = 40

// CountJobs returns non-zero job counts by kind and state.
//
// Counts of live states (scheduled, retrying, running, paused) are exact:
// they are read through the partial indexes on those states, so their cost
// grows with the live jobs, not with history. Counts of final states
// (succeeded, dead, cancelled) are exact while there are at most 10,000
// final jobs; above that they are estimates from a TABLESAMPLE SYSTEM
// sample of about 20,000 rows of jobs and of the history. While every
// table has been analyzed, the sample's shares are scaled to the
// planner's row count (pg_class.reltuples, kept fresh by autovacuum) less
// the live jobs; where one has not (a history just moved or loaded,
// today's first partition), each sampled count is divided by the sampling
// rate, sized from the tables' current sizes, so no fresh ANALYZE is
// needed and nothing is counted row by row.
func (s *Store) CountJobs(ctx context.Context) ([]store.StateCount, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	counts, err := s.countRows(ctx, s.q.countLive)
	if err != nil {
		return nil, err
	}
	var nFinal int64
	if err := s.pool.QueryRow(ctx, s.q.finalBound, exactFinalLimit+1).Scan(&nFinal); err != nil {
		return nil, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	var final []store.StateCount
	if nFinal <= exactFinalLimit {
		final, err = s.countRows(ctx, s.q.countFinal)
	} else {
		final, err = s.estimateFinal(ctx, counts)
	}
	if err != nil {
		return nil, err
	}
	return append(counts, final...), nil
}

func (s *Store) estimateFinal(ctx context.Context, live []store.StateCount) ([]store.StateCount, error) {
	var (
		pages, tuples, measuredPages float64
		unanalyzed                   int
	)
	if err := s.pool.QueryRow(ctx, s.q.reltuples).Scan(&pages, &tuples, &measuredPages, &unanalyzed); err != nil {
		return nil, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	var nLive float64
	for _, c := range live {
		nLive += float64(c.Count)
	}
	// The planner's total when every relation was analyzed; otherwise
	// (a history just moved or loaded, today's first partition) the rows
	// the pages there are hold, and the sample stands for the whole.
	planner := unanalyzed == 0 && tuples > nLive+exactFinalLimit
	rows := tuples
	if !planner {
		density := float64(assumedRowsPerPage)
		if tuples > 0 && measuredPages > 0 {
			density = tuples / measuredPages
		}
		rows = pages * density
	}
	pct := 100.0
	if rows > 0 {
		pct = min(100, max(0.01, 100*sampleRows/rows))
	}
	if !planner && pct > 50 { // a small table: reading it is about as cheap
		return s.countRows(ctx, s.q.countFinal)
	}
	sample, err := s.countRows(ctx, s.q.finalSample, pct)
	if err != nil {
		return nil, err
	}
	var nSample float64
	for _, c := range sample {
		nSample += float64(c.Count)
	}
	if nSample == 0 {
		return s.countRows(ctx, s.q.countFinal)
	}
	// Planner: its total less the live jobs, in the sample's shares.
	// Otherwise SYSTEM sampling kept each page with probability pct/100,
	// so a sampled count over that is an unbiased estimate of the whole.
	scale := 100 / pct
	if planner {
		scale = (tuples - nLive) / nSample
	}
	for i := range sample {
		sample[i].Count = max(1, int64(float64(sample[i].Count)*scale+0.5))
	}
	return sample, nil
}

func (s *Store) countRows(ctx context.Context, sql string, args ...any) ([]store.StateCount, error) {
	rows, _ := s.pool.Query(ctx, sql, args...)
	var (
		counts []store.StateCount
		c      store.StateCount
		state  string
	)
	_, err := pgx.ForEachRow(rows, []any{&c.Kind, &state, &c.Count}, func() error {
		c.State = store.State(state)
		counts = append(counts, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: count jobs: %w", err)
	}
	return counts, nil
}
