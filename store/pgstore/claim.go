package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

// Claim claims due jobs as store.Store requires, in one statement (see the
// package documentation for its shape). Kinds listed twice count once, with
// the smaller limit. An empty Kinds claims nothing. Due-ness, lease expiry
// and ClaimResult.Now come from the database's now(). Each claimed job's
// Fence grows by one. Params that ClaimParams.Validate refuses, or kinds
// PostgreSQL cannot take as text, fail with an error wrapping
// store.ErrInvalidParams. While a Subscribe is listening, each range scan
// starts where the previous claim left it (claim cursors, cursor.go), so
// claims do not slow down while a held snapshot keeps vacuum from
// removing the index entries of claimed jobs.
func (s *Store) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.flowActive(ctx, params) { // flow-controlled kinds, sequences or aging: claimflow.go
		return s.claimFlow(ctx, params)
	}
	kinds, limits, err := checkedClaimKinds(params)
	if err != nil || len(kinds) == 0 {
		return s.claimNothing(ctx, err)
	}
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	from, cursor, audit := s.cursors.begin(kinds, time.Now())
	if audit {
		s.auditCursors(kinds, from)
	}
	var held []pgtype.Timestamptz
	err = s.claimRows(ctx, res, &held, kinds, limits, params, from)
	s.cursors.end(cursor, kinds, held, res.Now, err == nil)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkedClaimKinds validates params and returns the claim's kinds and their
// limits (plainClaimKinds); none means the claim takes nothing.
func checkedClaimKinds(params *store.ClaimParams) ([]string, []int32, error) {
	if params == nil {
		return nil, nil, fmt.Errorf("pgstore: claim: nil params: %w", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	kinds, limits := plainClaimKinds(params)
	return kinds, limits, nil
}

// claimNothing is the result of a claim that takes nothing (no kinds), or
// err.
func (s *Store) claimNothing(ctx context.Context, err error) (*store.ClaimResult, error) {
	if err != nil {
		return nil, err
	}
	now, err := s.Now(ctx)
	return &store.ClaimResult{Jobs: []*store.JobRecord{}, Now: now}, err
}

// plainClaimKinds returns the claim's kinds, each once, and their limits (the
// smaller of a kind listed twice, at most params.Limit).
func plainClaimKinds(params *store.ClaimParams) (kinds []string, limits []int32) {
	kinds = make([]string, 0, len(params.Kinds))
	limits = make([]int32, 0, len(params.Kinds))
	seen := make(map[string]int, len(params.Kinds))
	for _, k := range params.Kinds {
		lim := int32(min(k.Limit, params.Limit))
		if i, ok := seen[k.Kind]; ok {
			limits[i] = min(limits[i], lim)
			continue
		}
		seen[k.Kind] = len(kinds)
		kinds = append(kinds, k.Kind)
		limits = append(limits, lim)
	}
	return kinds, limits
}

// claimPlanSQL makes the claim that follows it in its transaction run on
// its generic plan (genericPlan), without JIT: for the same reason as in
// the flow statements (jitOffSQL), a claim never runs long enough to pay
// back compiling it.
const claimPlanSQL = `SELECT ` + genericPlan + `, ` + jitOff

// claimPlanAsyncSQL is claimPlanSQL that also commits the claim without
// waiting for the WAL flush (WithAsyncClaimsAndOutcomes).
const claimPlanAsyncSQL = claimPlanSQL + `, ` + syncOff

// claimRows runs the claim statement, from giving each range's lower
// bound, and reads its rows into res and held (each range's earliest due
// candidate left behind). When the claim of one kind found that priority
// aging mixes its ranges (claimAgedMixed), the open or plain claim is made
// in its place, and for the kind's claims for a while (agedmixed.go).
// When the statement lost some of its first choices to other claims, its
// second round (claimLost) takes the next-best rows in their place. held
// stays the first round's: the second round only takes rows, so the
// earliest due row left in a range is at or after it, and a cursor there
// skips nothing.
func (s *Store) claimRows(ctx context.Context, res *store.ClaimResult, held *[]pgtype.Timestamptz,
	kinds []string, limits []int32, params *store.ClaimParams, from []pgtype.Timestamptz) error {
	lost, err := s.claimRound(ctx, res, held, kinds, limits, params, from, s.agedMixed.tryOneKind(kinds, time.Now()))
	if err == nil && lost == claimAgedMixed {
		s.agedMixed.saw(kinds[0], time.Now())
		lost, err = s.claimRound(ctx, res, held, kinds, limits, params, from, false)
	}
	if err != nil {
		return err
	}
	if lost > 0 {
		s.claimLost(ctx, res, kinds, limits, params, from, lost)
	}
	return nil
}

// claimRound runs one claim statement (queueClaim; the claim of one kind
// only when oneKind) in its own transaction, reading its rows into res
// (whose Now, Clock and NextRunAt it sets anew) and held, and returns its
// lost column: how many of its first choices it lost, or claimAgedMixed.
func (s *Store) claimRound(ctx context.Context, res *store.ClaimResult, held *[]pgtype.Timestamptz,
	kinds []string, limits []int32, params *store.ClaimParams, from []pgtype.Timestamptz, oneKind bool) (int64, error) {
	*res = store.ClaimResult{Jobs: res.Jobs[:0]}
	b := &pgx.Batch{}
	sent := s.queueClaim(b, kinds, limits, params, from, oneKind)
	br := s.conn(ctx).SendBatch(ctx, b) // the pool, or a Citus claim's transaction (citusclaim.go)
	defer br.Close()
	var lost, skipped int64
	if err := readClaim(br, res, held, &lost, sent.open, &skipped); err != nil {
		return 0, err
	}
	if err := commitClaim(br, res, params); err != nil {
		return 0, err
	}
	s.claimMet(sent, skipped, lost)
	return lost, nil
}

// claimSent is which claim statement queueClaim queued: the open claim
// (claimopen.go), with the spare rows it reads, or the plain one.
type claimSent struct {
	open  bool
	spare int64
}

// openClaim reports whether no kind's limit binds a claim of total jobs,
// so that the open claim may make it.
func openClaim(limits []int32, total int32) bool {
	for _, l := range limits {
		if l < total {
			return false
		}
	}
	return true
}

// queueClaim queues the claim on b: its settings, then the statement: the
// claim of one kind (claimOneKindSQL) when it asks for one kind and
// oneKind allows it, the open claim when no kind's limit binds
// (openClaim), else the plain one.
// The claim runs on its generic plan (claimPlanSQL), in the same round
// trip: the two statements share the batch's implicit transaction.
func (s *Store) queueClaim(b *pgx.Batch, kinds []string, limits []int32, params *store.ClaimParams, from []pgtype.Timestamptz,
	oneKind bool) claimSent {
	if s.opts.asyncCommits {
		b.Queue(claimPlanAsyncSQL)
	} else {
		b.Queue(claimPlanSQL)
	}
	total := int32(min(params.Limit, 1<<30))
	if len(kinds) == 1 && oneKind {
		b.Queue(s.q.claimOneKind, kinds[0], min(limits[0], total), from, params.Owner,
			micros(params.LeaseDuration), micros(params.Ahead), micros(params.AgeAfter))
		return claimSent{}
	}
	if openClaim(limits, total) {
		spare := s.spare.get()
		b.Queue(s.q.claimOpen, kinds, limits, total, params.Owner,
			micros(params.LeaseDuration), micros(params.AgeAfter), from, micros(params.Ahead), spare)
		return claimSent{open: true, spare: spare}
	}
	b.Queue(s.q.claim, kinds, limits, total, params.Owner,
		micros(params.LeaseDuration), micros(params.AgeAfter), from, micros(params.Ahead))
	return claimSent{}
}

// claimMet records, after an open claim committed, what it stepped over
// (skipped) and how far short it stopped (lost), for the spare rows of
// the next one.
func (s *Store) claimMet(sent claimSent, skipped, lost int64) {
	if sent.open {
		s.spare.observe(sent.spare, skipped, lost)
	}
}

// readClaim reads the results of what queueClaim queued into res, held
// and lost (how many of its first choices the claim did not get), and,
// for the open claim, skipped (the rows other claims held that it stepped
// over).
func readClaim(br pgx.BatchResults, res *store.ClaimResult, held *[]pgtype.Timestamptz, lost *int64, open bool, skipped *int64) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("pgstore: claim: plan settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	defer rows.Close()
	var (
		next  *time.Time
		clock time.Time
		js    jobScan
	)
	// now, next, held, lost and skipped are the same on every row (now()
	// and scalar subqueries): read from the first row only, the later
	// rows skip them (nil) rather than scan held's array again for each
	// job. clock (clock_timestamp()) is read on every row, and the latest
	// kept.
	head := []any{&res.Now, &clock, &next, held, lost}
	if open {
		head = append(head, skipped)
	}
	jobCol := len(head)
	dest := append(head, js.dest()...)
	jobDest := slices.Clone(dest[jobCol:])
	for first := true; rows.Next(); first = false {
		if !first {
			dest[0] = nil
			clear(dest[2:jobCol])
		}
		js = jobScan{}
		if rows.RawValues()[jobCol] == nil { // no job claimed: only now, clock, next, held and lost
			clear(dest[jobCol:])
		} else {
			copy(dest[jobCol:], jobDest)
		}
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("pgstore: claim: %w", err)
		}
		if first && next != nil {
			res.NextRunAt = *next
		}
		if clock.After(res.Clock) {
			res.Clock = clock
		}
		if dest[jobCol] == nil {
			continue
		}
		j, err := js.record()
		if err != nil {
			return fmt.Errorf("pgstore: claim: %w", err)
		}
		res.Jobs = append(res.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	return nil
}

// commitClaim ends the batch of a claim that readClaim read, and puts its
// jobs in claim order.
func commitClaim(br pgx.BatchResults, res *store.ClaimResult, params *store.ClaimParams) error {
	// The batch's implicit transaction commits after the rows: only its
	// end says the claim is made. A commit that fails (a primary stopped
	// while a synchronous standby confirms it) leaves the jobs unclaimed
	// in the database, and a host that ran them would run them alongside
	// their next claimer, with the same fencing token.
	if err := br.Close(); err != nil {
		res.Jobs = res.Jobs[:0]
		return fmt.Errorf("pgstore: claim: commit: %w", err)
	}
	res.Ahead = params.Ahead
	sortClaimed(res.Jobs, res.Now, params.AgeAfter)
	return nil
}

// sortClaimed puts jobs in claim order, the order plainClaimOrderSQL
// gives in the statement: jobs due for ageAfter at now (the statement's
// now()) first, then strict priority, then run_at and id. The claim
// statement returns its rows unordered, and sorting them here costs the
// client a few microseconds per claim instead of costing the server a
// sort of every claimed row.
func sortClaimed(jobs []*store.JobRecord, now time.Time, ageAfter time.Duration) {
	// As the statement computes it: $6 in whole microseconds, and a job
	// aged when its run_at <= now() - $6.
	age := time.Duration(micros(ageAfter)) * time.Microsecond
	aged := func(j *store.JobRecord) bool { return age > 0 && !j.RunAt.After(now.Add(-age)) }
	rank := func(j *store.JobRecord) int {
		if aged(j) {
			return 0
		}
		return j.Priority
	}
	slices.SortFunc(jobs, func(a, b *store.JobRecord) int {
		return cmp.Or(
			cmp.Compare(rank(a), rank(b)), // aged (0) before every priority (1-3)
			a.RunAt.Compare(b.RunAt),
			bytes.Compare(a.ID[:], b.ID[:]), // uuid order, as PostgreSQL's
		)
	})
}
