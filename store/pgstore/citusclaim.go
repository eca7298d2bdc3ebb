package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// citusPeekSQL reads, without locking, the claim's candidates on one
// shard: per requested (kind, priority), up to one more than the kind's
// limit of due jobs in run_at order (a spare the claim cannot take, whose
// run_at then says more are due: NextRunAt) and the first job not yet
// due, through jobs_claim_idx as the claim's cand does.
const citusPeekSQL = `SELECT k.kind, p.priority, c.run_at, c.id, c.due
FROM unnest($1::text[], $2::int[]) AS k(kind, lim)
CROSS JOIN unnest('{1,2,3}'::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
	(SELECT j.run_at, j.id, true AS due FROM {jobs} j
	WHERE {onshard:j}j.kind = k.kind AND j.priority = p.priority
	  AND j.state IN ` + claimableSQL + ` AND j.run_at <= now() + $3::bigint * interval '1 microsecond'
	ORDER BY j.run_at
	LIMIT k.lim + 1)
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
	kinds, limits, err := checkedClaimKinds(params)
	if err != nil || len(kinds) == 0 {
		return c.s.claimNothing(ctx, err)
	}
	var res *store.ClaimResult
	err = pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) error {
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

// citusClaimIDsSQL claims the jobs $1 of the shard (the candidates a
// Claim chose there) that are still claimable and due within $2
// microseconds, skipping those another transaction holds: a statement
// far simpler for the worker to plan than pgstore's claim, which the
// shard's worker plans anew for every run (Citus sends it as text). A
// probe by primary key per ID locks each row, and the UPDATE reaches the
// locked rows by tuple ID ({routed:j}, placement.go): as one scan of the
// shard for the IDs, a worker whose statistics called the shard empty
// read all of it for the shard's condition alone, or all of the partial
// index the bare state test matches (TestCitusPlansAreLinear).
var citusClaimIDsSQL = `WITH l AS MATERIALIZED (
	SELECT p.tid
	FROM unnest($1::uuid[]) AS x(id)
	CROSS JOIN LATERAL (
		SELECT j.ctid AS tid FROM {jobs} j
		WHERE {onshard:j}j.id = x.id AND (j.state IN ` + claimableSQL + `) IS TRUE
		  AND j.run_at <= now() + $2::bigint * interval '1 microsecond'
		FOR UPDATE SKIP LOCKED
	) p
)
` + strings.NewReplacer("$4", "$3", "$5", "$4").Replace(plainClaimSetSQL) + `
WHERE {routed:j}j.ctid = ANY (ARRAY(SELECT tid FROM l))
RETURNING {jcols}`

// claimPicked claims the candidates picks chose on each shard, every
// shard's statement in one round trip, and adds what they took to res.
// Candidates another claim took meanwhile are replaced by the shard's
// next best: pgstore's claim placed on that shard, for as many jobs of
// each kind as were lost there (one more round trip, rare).
func (c *CitusStore) claimPicked(ctx context.Context, tx pgx.Tx, res *store.ClaimResult, picks map[int][]citusCand,
	params *store.ClaimParams) error {
	slots := sortedSlots(picks)
	b := &pgx.Batch{}
	for _, slot := range slots {
		ids := make([][16]byte, len(picks[slot]))
		for i, cd := range picks[slot] {
			ids[i] = cd.id
		}
		b.Queue(c.placed[slot].sql(citusPrefixed(citusClaimIDsSQL)), ids, micros(params.Ahead), params.Owner,
			micros(params.LeaseDuration))
	}
	br := tx.SendBatch(ctx, b)
	lost := map[int]map[string]int{}
	for _, slot := range slots {
		rows, _ := br.Query()
		jobs, err := collectJobs(rows)
		if err != nil {
			br.Close()
			return err
		}
		got := map[uuid.UUID]bool{}
		for _, j := range jobs {
			got[j.ID] = true
		}
		for _, cd := range picks[slot] {
			if !got[cd.id] {
				if lost[slot] == nil {
					lost[slot] = map[string]int{}
				}
				lost[slot][cd.kind]++
			}
		}
		res.Jobs = append(res.Jobs, jobs...)
	}
	if err := br.Close(); err != nil {
		return err
	}
	res.Ahead = params.Ahead
	tctx := withConn(ctx, tx)
	for _, slot := range sortedSlots(lost) {
		p := *params
		p.Kinds, p.Limit = nil, 0
		for _, kind := range slices.Sorted(maps.Keys(lost[slot])) {
			p.Kinds = append(p.Kinds, store.KindLimit{Kind: kind, Limit: lost[slot][kind]})
			p.Limit += lost[slot][kind]
		}
		r, err := c.placed[slot].Claim(tctx, &p)
		if err != nil {
			return err
		}
		res.Jobs = append(res.Jobs, r.Jobs...)
		res.Clock = later(res.Clock, r.Clock)
		res.NextRunAt = earliest(res.NextRunAt, r.NextRunAt)
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
		_, err := pgx.ForEachRow(rows, []any{&cd.kind, &cd.priority, &cd.runAt, (*[16]byte)(&cd.id), &isDue}, func() error {
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
// returns the chosen ones by slot, and the earliest run_at of the
// candidates it left (zero: none).
func pickCandidates(due []citusCand, params *store.ClaimParams, now time.Time, limits []int32, kinds []string) (map[int][]citusCand, time.Time) {
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
	picks := map[int][]citusCand{}
	var left time.Time
	total := 0
	for _, cd := range due {
		if total >= params.Limit || kindLimit[cd.kind] <= 0 {
			left = earliest(left, cd.runAt)
			continue
		}
		picks[cd.slot] = append(picks[cd.slot], cd)
		kindLimit[cd.kind]--
		total++
	}
	return picks, left
}
