package sqlitestore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/axsched/ax/store"
)

// Claim moves up to params.Limit due jobs of the requested kinds to
// running, as store.Store.Claim and store.FlowStore document, in one BEGIN
// IMMEDIATE transaction: strictly by priority, then run_at, then ID,
// taking at most each kind's limit (a kind listed twice keeps its first
// limit). A claim with priority aging, or of a kind whose flow settings
// hold claims back or that has sequences, is claimFlow's (claimflow.go). Each
// claimed job gets Owner, a fresh random LeaseToken, LeaseExpiresAt = now +
// LeaseDuration, AttemptedAt = now, Attempt + 1, Fence + 1 and its cancel
// and pause requests cleared. ClaimResult.NextRunAt is the earliest run_at
// of the claimable jobs of the requested kinds left behind (zero when
// none). Invalid params fail with an error wrapping store.ErrInvalidParams.
//
// For each priority level and kind, one range scan of the jobs_claim index
// reads the rows the kind may take and one more (the first it leaves
// behind, which also gives NextRunAt), and one statement updates the
// claimed rows by rowid: O((kinds + claimed) · log n), whatever the
// history and the far-future backlog.
func (s *Store) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if params == nil {
		return nil, fmt.Errorf("claim jobs: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	type want struct {
		kind string
		left int
	}
	wants := make([]want, 0, len(params.Kinds))
	seen := make(map[string]bool, len(params.Kinds))
	for _, kl := range params.Kinds {
		if !seen[kl.Kind] {
			seen[kl.Kind] = true
			wants = append(wants, want{kl.Kind, kl.Limit})
		}
	}
	var res *store.ClaimResult
	err := s.write(ctx, func(w *wtx) error {
		kinds, limits := make([]string, len(wants)), make([]int, len(wants))
		for i, wt := range wants {
			kinds[i], limits[i] = wt.kind, wt.left
		}
		flow, err := w.wantsFlowClaim(params, kinds)
		if err != nil {
			return err
		}
		if flow {
			res, err = w.claimFlow(params, kinds, limits)
			return err
		}
		res = &store.ClaimResult{Now: w.now}
		now, left := toUS(w.now), params.Limit
		expires := toUS(w.now.Add(params.LeaseDuration))
		type cand struct {
			seq   int64
			id    []byte
			runAt int64
			want  int
			taken bool
		}
		var (
			cands, due []*cand
			next       int64
			found      bool
		)
		for _, prio := range store.Priorities {
			// One range scan per kind reads the n rows it may take and
			// one more: the first row a kind leaves behind, due or not,
			// is its candidate for NextRunAt (n = 0 is a pure probe).
			cands, due = cands[:0], due[:0]
			for wi, wt := range wants {
				n := min(wt.left, left)
				rows, err := w.query(qClaimCandidates, wt.kind, prio, n+1)
				if err != nil {
					return err
				}
				for rows.Next() {
					c := &cand{want: wi}
					if err := rows.Scan(&c.seq, &c.id, &c.runAt); err != nil {
						rows.Close()
						return err
					}
					cands = append(cands, c)
					if c.runAt <= now {
						due = append(due, c)
					}
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
			}
			// Each kind's due rows beyond its limit are not candidates;
			// then the first `left` of all, in claim order, respect every
			// limit.
			perKind := make(map[int]int, len(wants))
			due = slices.DeleteFunc(due, func(c *cand) bool {
				perKind[c.want]++
				return perKind[c.want] > min(wants[c.want].left, left)
			})
			slices.SortFunc(due, func(a, b *cand) int {
				return cmp.Or(cmp.Compare(a.runAt, b.runAt), bytes.Compare(a.id, b.id))
			})
			take := due[:min(left, len(due))]
			seqs := make([]int64, len(take))
			for i, c := range take {
				seqs[i] = c.seq
				c.taken = true
				wants[c.want].left--
			}
			left -= len(take)
			for _, c := range cands {
				if !c.taken && (!found || c.runAt < next) {
					next, found = c.runAt, true
				}
			}
			if len(take) == 0 {
				continue
			}
			list, err := json.Marshal(seqs)
			if err != nil {
				return err
			}
			js, err := loadAll(w.query(qClaimUpdate, params.Owner, expires, now, string(list)))
			if err != nil {
				return err
			}
			claimed := make([]*store.JobRecord, len(js))
			for i, j := range js {
				if claimed[i], err = j.record(); err != nil {
					return err
				}
			}
			slices.SortFunc(claimed, func(a, b *store.JobRecord) int {
				return cmp.Or(a.RunAt.Compare(b.RunAt), bytes.Compare(a.ID[:], b.ID[:]))
			})
			res.Jobs = append(res.Jobs, claimed...)
		}
		if found {
			res.NextRunAt = fromUS(next)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	return res, nil
}
