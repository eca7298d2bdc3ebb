package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/axsched/ax/store"
)

var _ store.FinishClaimer = (*Store)(nil)

// FinishClaim writes outcomes and claims, as store.FinishClaimer
// documents, in one round trip and one transaction when it can: the
// finish statement and the claim statement go out in one batch, each
// after its own settings (generic plans; WithAsyncClaimsAndOutcomes'
// commit), and commit together. The claim sees what the outcomes did: a
// retry due at once may be claimed again by it.
//
// It falls back to FinishFlow then Claim, two round trips, where one
// statement of each cannot do the work: outcomes with results or Then
// jobs, a call inside a caller's transaction, kinds with flow settings or
// sequences (flow control's statements), an empty finish, or a finish
// that must first make today's history partitions. A row another
// transaction holds is written after the commit, waiting for its lock, as
// Finish does.
func (s *Store) FinishClaim(ctx context.Context, finish []store.FinishParams, claim *store.ClaimParams) (*store.FinishResult, *store.ClaimResult, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	if claim == nil {
		return nil, nil, fmt.Errorf("pgstore: finish and claim: nil claim params: %w", store.ErrInvalidParams)
	}
	if err := claim.Validate(); err != nil {
		return nil, nil, fmt.Errorf("pgstore: finish and claim: %w", err)
	}
	for i := range finish {
		if err := finish[i].Validate(); err != nil {
			return nil, nil, fmt.Errorf("pgstore: finish row %d: %w", i, err)
		}
	}
	if s.oneTripFinishClaim(ctx, finish, claim) {
		fr, cr, err := s.finishClaimOnce(ctx, finish, claim)
		if err == nil || !s.isNoPartition(err) {
			return fr, cr, err
		}
		// Nothing applied: Finish makes the partitions, then the claim.
	}
	fr, err := s.FinishFlow(ctx, finish)
	if err != nil {
		return nil, nil, err
	}
	cr, err := s.Claim(ctx, claim)
	if err != nil {
		return fr, nil, err
	}
	return fr, cr, nil
}

// oneTripFinishClaim reports whether the plain finish and claim
// statements can do a FinishClaim call's work (see FinishClaim).
func (s *Store) oneTripFinishClaim(ctx context.Context, finish []store.FinishParams, claim *store.ClaimParams) bool {
	if len(finish) == 0 || len(claim.Kinds) == 0 || anyRich(finish) || ctx.Value(connKey{}) != nil {
		return false
	}
	return !s.flowFinishes(ctx) && !s.flowActive(ctx, claim)
}

// finishClaimOnce is FinishClaim's one round trip, for valid params.
func (s *Store) finishClaimOnce(ctx context.Context, finish []store.FinishParams, claim *store.ClaimParams) (*store.FinishResult, *store.ClaimResult, error) {
	a := newFinishArrays(finish)
	kinds, limits := plainClaimKinds(claim)
	lo, hi := s.finishWindow(ctx)
	from, cursor, audit := s.cursors.begin(kinds, time.Now())
	if audit {
		s.auditCursors(kinds, from)
	}
	b := &pgx.Batch{}
	b.Queue(jitOffSQL + s.endSettings(ctx))
	b.Queue(s.q.finish, a.ids, a.tokens, a.outcomes, a.delays, a.errs, s.channel, lo, hi)
	sent := s.queueClaim(b, kinds, limits, claim, from, s.agedMixed.tryOneKind(kinds, time.Now()))

	applied := make(map[store.Lease]bool, len(finish))
	var (
		wait          []store.FinishParams
		held          []pgtype.Timestamptz
		lost, skipped int64
	)
	res := &store.ClaimResult{Jobs: []*store.JobRecord{}}
	br := s.pool.SendBatch(ctx, b)
	err := readFinished(br, applied, &wait)
	if err == nil {
		err = readClaim(br, res, &held, &lost, sent.open, &skipped)
	}
	if err == nil {
		err = commitClaim(br, res, claim)
		if err == nil {
			s.claimMet(sent, skipped, lost)
		}
	} else {
		_ = br.Close() // the first error says what failed; the transaction rolled back
	}
	if err == nil && lost == claimAgedMixed {
		s.agedMixed.saw(kinds[0], time.Now())
		// As claimRows, but the outcomes are committed: a claim that
		// fails now leaves res as the first statement made it (no jobs),
		// as a failed second round does (claimLost).
		again := &store.ClaimResult{Jobs: res.Jobs}
		var againHeld []pgtype.Timestamptz
		lost = 0
		if l, cerr := s.claimRound(ctx, again, &againHeld, kinds, limits, claim, from, false); cerr == nil {
			res, held, lost = again, againHeld, l
		}
	}
	if err == nil && lost > 0 {
		s.claimLost(ctx, res, kinds, limits, claim, from, lost) // as claimRows
	}
	s.cursors.end(cursor, kinds, held, res.Now, err == nil)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: finish and claim: %w", err)
	}
	fr := &store.FinishResult{OK: make([]bool, len(finish))}
	if len(wait) > 0 {
		// Committed with the claim: the claim and the other outcomes
		// stand, and the caller writes these again on an error
		// (store.FinishClaimer).
		if err := s.finishBusy(ctx, finish, wait, applied); err != nil {
			reportApplied(fr.OK, finish, applied)
			return fr, res, err
		}
	}
	reportApplied(fr.OK, finish, applied)
	return fr, res, nil
}

// readFinished reads the settings' and the finish statement's results of
// a FinishClaim batch into applied and wait (see scanFinished).
func readFinished(br pgx.BatchResults, applied map[store.Lease]bool, wait *[]store.FinishParams) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("finish: settings: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("finish: %w", invalidData(err))
	}
	*wait, err = scanFinished(rows, applied, *wait)
	if err != nil {
		return fmt.Errorf("finish: %w", invalidData(err))
	}
	return nil
}
