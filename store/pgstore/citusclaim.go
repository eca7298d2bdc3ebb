package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

// citusPeekSQL reads, without locking, the claim's candidates on one
// shard: per requested (kind, priority), up to the kind's limit of due
// jobs in run_at order and the first job not yet due, through
// jobs_claim_idx as the claim's cand does.
const citusPeekSQL = `SELECT k.kind, p.priority, c.run_at, c.id, c.due
FROM unnest($1::text[], $2::int[]) AS k(kind, lim)
CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
	(SELECT j.run_at, j.id, true AS due FROM {jobs} j
	WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
	  AND j.state IN ` + claimableSQL + ` AND j.run_at <= now() + $3::bigint * interval '1 microsecond'
	ORDER BY j.run_at
	LIMIT k.lim)
	UNION ALL
	(SELECT j.run_at, j.id, false FROM {jobs} j
	WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
	  AND j.state IN ` + claimableSQL + ` AND j.run_at > now() + $3::bigint * interval '1 microsecond'
	ORDER BY j.run_at
	LIMIT 1)
) c`

// citusCand is one candidate a peek found.
type citusCand struct {
	slot     int
	kind     string
	priority int16
	runAt    time.Time
	id       uuid.UUID
}

// Claim claims due jobs across the shards in one transaction of the
// coordinator, each statement on one shard: it reads each shard's
// candidates without locking them (citusPeekSQL, every shard in one round
// trip), chooses among them in claim order (aged jobs first, then
// priority, then run_at, with the per-kind and total limits), and runs
// the placed claim of Store.Claim on each shard it chose jobs from, for
// as many jobs of each kind as it chose there. So a claim takes the best
// due jobs of the whole cluster, as on PostgreSQL, unless another claim
// took some of them in between (then the shard's claim takes its next
// best, as Store.Claim's second round does). Every claimed job's
// AttemptedAt and the result's Now are one reading of the coordinator's
// clock, the transaction's start.
func (c *CitusStore) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("pgstore: claim: nil params: %w", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	kinds, limits := plainClaimKinds(params)
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	if len(kinds) == 0 {
		now, err := c.Now(ctx)
		res.Now = now
		return res, err
	}
	err := pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
		res = &store.ClaimResult{Jobs: []*store.JobRecord{}}
		now, due, future, err := c.peek(ctx, tx, kinds, limits, params)
		if err != nil {
			return err
		}
		res.Now = now
		picks, left := pickCandidates(due, params, now, limits, kinds)
		res.NextRunAt = left
		for _, f := range future {
			res.NextRunAt = earliest(res.NextRunAt, f.runAt)
		}
		return c.claimPicked(ctx, tx, res, picks, params)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", invalidData(err))
	}
	if res.Clock.Before(res.Now) {
		res.Clock = time.Time{}
	}
	sortClaimed(res.Jobs, res.Now, params.AgeAfter)
	return res, nil
}

// claimPicked runs pgstore's claim placed on each shard of picks, for the
// jobs of each kind picked there, all in one round trip, and adds what
// they took to res. A shard whose claim lost rows to another claim runs
// the claim's second round (claimlost.go), one round trip more.
func (c *CitusStore) claimPicked(ctx context.Context, tx pgx.Tx, res *store.ClaimResult, picks map[int]map[string]int,
	params *store.ClaimParams) error {
	type slotClaim struct {
		slot   int
		kinds  []string
		limits []int32
		params store.ClaimParams
		res    store.ClaimResult
		lost   int64
	}
	slots := sortedSlots(picks)
	claims := make([]slotClaim, len(slots))
	b := &pgx.Batch{}
	for i, slot := range slots {
		sc := &claims[i]
		sc.slot, sc.params = slot, *params
		sc.params.Kinds, sc.params.Limit = nil, 0
		for _, kind := range slices.Sorted(maps.Keys(picks[slot])) {
			n := picks[slot][kind]
			sc.kinds, sc.limits = append(sc.kinds, kind), append(sc.limits, int32(n))
			sc.params.Kinds = append(sc.params.Kinds, store.KindLimit{Kind: kind, Limit: n})
			sc.params.Limit += n
		}
		c.placed[slot].queueClaim(b, sc.kinds, sc.limits, &sc.params, nil)
	}
	br := tx.SendBatch(ctx, b)
	for i := range claims {
		var held []pgtype.Timestamptz
		if err := readClaim(br, &claims[i].res, &held, &claims[i].lost); err != nil {
			br.Close()
			return err
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	tctx := withConn(ctx, tx)
	for i := range claims {
		sc := &claims[i]
		if sc.lost > 0 {
			c.placed[sc.slot].claimLost(tctx, &sc.res, sc.kinds, sc.limits, &sc.params, nil, sc.lost)
		}
		res.Jobs = append(res.Jobs, sc.res.Jobs...)
		res.Clock = later(res.Clock, sc.res.Clock)
		res.Ahead = params.Ahead
		res.NextRunAt = earliest(res.NextRunAt, sc.res.NextRunAt)
	}
	return nil
}

// peek reads the coordinator's clock (the transaction's start) and the
// candidates of every shard, in one round trip.
func (c *CitusStore) peek(ctx context.Context, tx pgx.Tx, kinds []string, limits []int32,
	params *store.ClaimParams) (now time.Time, due, future []citusCand, err error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT now()`)
	for _, p := range c.placed {
		b.Queue(p.sql(citusPeekSQL), kinds, limits, micros(params.Ahead))
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if err := br.QueryRow().Scan(&now); err != nil {
		return now, nil, nil, fmt.Errorf("read the clock: %w", err)
	}
	for slot := range c.placed {
		rows, _ := br.Query()
		var (
			cd    citusCand
			isDue bool
		)
		cd.slot = slot
		_, err := pgx.ForEachRow(rows, []any{&cd.kind, &cd.priority, &cd.runAt, &cd.id, &isDue}, func() error {
			if isDue {
				due = append(due, cd)
			} else {
				future = append(future, cd)
			}
			return nil
		})
		if err != nil {
			return now, nil, nil, fmt.Errorf("read the candidates of slot %d: %w", slot, err)
		}
	}
	return now, due, future, br.Close()
}

// pickCandidates chooses among the due candidates of every shard in claim
// order (plainClaimOrderSQL) within the per-kind and total limits, and
// returns how many of each kind to claim on each slot, and the earliest
// run_at of the candidates it left (zero: none).
func pickCandidates(due []citusCand, params *store.ClaimParams, now time.Time, limits []int32, kinds []string) (map[int]map[string]int, time.Time) {
	aged := func(cd *citusCand) bool {
		return params.AgeAfter > 0 && !cd.runAt.After(now.Add(-params.AgeAfter))
	}
	sort.Slice(due, func(a, b int) bool {
		x, y := &due[a], &due[b]
		ax, ay := aged(x), aged(y)
		if ax != ay {
			return ax
		}
		px, py := x.priority, y.priority
		if ax {
			px, py = 0, 0
		}
		if px != py {
			return px < py
		}
		if !x.runAt.Equal(y.runAt) {
			return x.runAt.Before(y.runAt)
		}
		return string(x.id[:]) < string(y.id[:])
	})
	kindLimit := map[string]int{}
	for i, k := range kinds {
		kindLimit[k] = int(limits[i])
	}
	picks := map[int]map[string]int{}
	var left time.Time
	total := 0
	for _, cd := range due {
		if total >= params.Limit || kindLimit[cd.kind] <= 0 {
			left = earliest(left, cd.runAt)
			continue
		}
		if picks[cd.slot] == nil {
			picks[cd.slot] = map[string]int{}
		}
		picks[cd.slot][cd.kind]++
		kindLimit[cd.kind]--
		total++
	}
	return picks, left
}
