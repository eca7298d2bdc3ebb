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
// running, as store.Store.Claim documents, in one BEGIN IMMEDIATE
// transaction: strictly by priority, then run_at, then ID, taking at most
// each kind's limit (a kind listed twice keeps its first limit). Each
// claimed job gets Owner, a fresh random LeaseToken, LeaseExpiresAt = now +
// LeaseDuration, AttemptedAt = now, Attempt + 1, Fence + 1 and its cancel
// and pause requests cleared. ClaimResult.NextRunAt is the earliest run_at
// of the claimable jobs of the requested kinds left behind (zero when
// none). Invalid params fail with an error wrapping store.ErrInvalidParams.
//
// For each priority level and kind, one range scan of the jobs_claim index
// reads at most the rows it may take, then one probe per (kind, priority)
// finds NextRunAt: O(kinds · log n + claimed · log n), whatever the
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
	var wants []want
	for _, kl := range params.Kinds {
		if !slices.ContainsFunc(wants, func(w want) bool { return w.kind == kl.Kind }) {
			wants = append(wants, want{kl.Kind, kl.Limit})
		}
	}
	var res *store.ClaimResult
	err := s.write(ctx, func(w *wtx) error {
		res = &store.ClaimResult{Now: w.now}
		now, left := toUS(w.now), params.Limit
		expires := toUS(w.now.Add(params.LeaseDuration))
		type cand struct {
			seq   int64
			id    []byte
			runAt int64
			want  int
		}
		var cands []cand
		for _, prio := range store.Priorities {
			if left == 0 {
				break
			}
			cands = cands[:0]
			for wi, wt := range wants {
				n := min(wt.left, left)
				if n == 0 {
					continue
				}
				rows, err := w.query(qClaimCandidates, wt.kind, prio, now, n)
				if err != nil {
					return err
				}
				for rows.Next() {
					c := cand{want: wi}
					if err := rows.Scan(&c.seq, &c.id, &c.runAt); err != nil {
						rows.Close()
						return err
					}
					cands = append(cands, c)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
			}
			// Each kind's candidates are at most its limit: the first
			// `left` of all, in claim order, respect every limit.
			slices.SortFunc(cands, func(a, b cand) int {
				return cmp.Or(cmp.Compare(a.runAt, b.runAt), bytes.Compare(a.id, b.id))
			})
			take := cands[:min(left, len(cands))]
			if len(take) == 0 {
				continue
			}
			seqs := make([]int64, len(take))
			for i, c := range take {
				seqs[i] = c.seq
				wants[c.want].left--
			}
			left -= len(take)
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
		var next int64
		found := false
		for _, wt := range wants {
			for _, prio := range store.Priorities {
				var at int64
				err := w.queryRow(qClaimNext, wt.kind, prio).Scan(&at)
				if err != nil {
					if isNoRows(err) {
						continue
					}
					return err
				}
				if !found || at < next {
					next, found = at, true
				}
			}
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
