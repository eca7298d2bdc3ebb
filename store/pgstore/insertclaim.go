package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// insertClaimedSQL is insertOne (queries.go) with the claim folded in:
// the row goes in running, leased to $14 for $15 µs, when its run_at is
// not after now() and no job of its kind is due and waiting. The waiting
// test reads jobs_claim_idx once per priority, from the kind's claim
// cursors ($16, one per priority; NULL: from the range's start) as the
// claim does, so that it steps over no more dead entries than a claim
// would; an uncorrelated EXISTS is an InitPlan, evaluated only when the
// run_at test leaves it to decide. t is materialized: each CASE below
// would otherwise repeat the test as an InitPlan of its own. A
// running row notifies no one (notifiedSQL takes claimable rows only).
// The holder branch returns the holder's columns, of which the caller
// reads only the ID; the rest, the unique-key lookup and the
// notification, is insertOneSQL's, shared with insertOne.
var insertClaimedSQL = insertOneSQL(`WITH `+historyGuardSQL+`, r AS (
	SELECT `+insertRunAtSQL+` AS at
), t AS MATERIALIZED (
	SELECT r.at, r.at <= now() AND NOT EXISTS (
		SELECT 1 FROM unnest('{1,2,3}'::smallint[]) AS p(priority)
		CROSS JOIN LATERAL (
			SELECT 1 FROM {jobs} w
			WHERE w.kind = $2 AND w.priority = p.priority
			  AND w.state IN `+claimableSQL+` AND w.run_at <= now()
			  AND w.run_at >= coalesce(($16::timestamptz[])[p.priority], '-infinity')
			ORDER BY w.run_at
			LIMIT 1
		) x
	) AS take
	FROM r
), ins AS (
	INSERT INTO {jobs} AS j (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts, unique_key,
		unique_global, unique_finished, unique_period, unique_window,
		state, owner, lease_token, attempt, fence, lease_expires_at, attempted_at)
	SELECT $1, $2, $3, $4, $5, t.at, t.at, $8, $9, $11, $12, $13, `+uniqueWindowSQL("$13::int")+`,
		CASE WHEN t.take THEN 'running' ELSE 'scheduled' END,
		CASE WHEN t.take THEN $14 ELSE '' END,
		CASE WHEN t.take THEN gen_random_uuid() END,
		CASE WHEN t.take THEN 1 ELSE 0 END,
		CASE WHEN t.take THEN 1 ELSE 0 END,
		CASE WHEN t.take THEN now() + $15::bigint * interval '1 microsecond' END,
		CASE WHEN t.take THEN now() END
	FROM t
	WHERE NOT EXISTS (SELECT 1 FROM guard)
	ON CONFLICT `+uniqueIndexSQL+` DO NOTHING
	RETURNING {jcols}`,
	"false, (SELECT count(*) FROM notified), ins.*", "true, 0, {cols}")

// InsertClaimed inserts one job as Insert does and, when
// store.InsertClaimer allows it, claims it for claim.Owner in the same
// statement: one round trip, as an insert. It claims only a job that
// InsertParams.Claimable allows, of a kind without sequences whose flow
// settings (as this Store last read them, at most flowCacheTTL ago, as
// the claim does) allow it (FlowConfig.InsertsClaimable), and while no
// job of the kind is due and waiting (read from the kind's claim
// cursors, as a claim reads). Other jobs go through Insert, unclaimed.
//
// The job is claimed in the insert's transaction: if the call fails
// after the commit (the connection drops, ctx ends), the job is running
// under a lease nobody extends, and runs again once that lease expires
// and it is rescued. With WithEarlyDirectStart the claimed job is handed
// to claim.EarlyStart before the commit is known durable, and the call
// returns after (earlystart.go).
func (s *Store) InsertClaimed(ctx context.Context, params *store.InsertParams, claim *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	if err := s.check(); err != nil {
		return store.InsertResult{}, nil, err
	}
	if params == nil {
		return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: nil params: %w", store.ErrInvalidParams)
	}
	if err := claim.Validate(); err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", err)
	}
	if err := params.Validate(); err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", err)
	}
	if !s.mayInsertClaimed(ctx, params) {
		res, err := s.Insert(ctx, []store.InsertParams{*params})
		if err != nil {
			return store.InsertResult{}, nil, err
		}
		return res[0], nil, nil
	}
	meta, err := metadataJSON(params.Metadata)
	if err != nil {
		return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", err)
	}
	var runAt *time.Time
	if !params.RunAt.IsZero() {
		// A past run_at: claimable at once, should the claim not take it.
		defer s.cursors.hold([]store.InsertParams{*params})() // until committed (cursor.go)
		runAt = &params.RunAt
	}
	from := s.cursors.peek(params.Kind)
	u := scopeOf(params)
	// A keyed job is never started before it is durable: see
	// WithEarlyDirectStart (earlystart.go).
	early := s.opts.earlyStart && claim.EarlyStart != nil && params.UniqueKey == ""
	for range maxInsertRetries {
		var (
			dup      bool
			notified int64
			js       jobScan
		)
		err := s.insertClaimedRow(ctx, early, append([]any{&dup, &notified}, js.dest()...),
			[16]byte(params.ID), params.Kind, payloadJSON(params.Payload), meta,
			params.Priority, runAt, micros(params.Delay), params.MaxAttempts, nullable(params.UniqueKey), s.channel,
			u.Global, u.Finished, periodSeconds(u), claim.Owner, micros(claim.LeaseDuration), from)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the holder changed under us: try again
		}
		if err != nil {
			return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", invalidData(err))
		}
		rec, err := js.record()
		if err != nil {
			return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", err)
		}
		res := store.InsertResult{ID: rec.ID, Duplicate: dup}
		if dup || rec.State != store.StateRunning {
			rec = nil
		}
		if early {
			if rec != nil {
				claim.EarlyStart.StartEarly(rec)
			}
			if err := s.waitFlushed(ctx); err != nil {
				return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", err)
			}
		}
		return res, rec, nil
	}
	return store.InsertResult{}, nil, fmt.Errorf("pgstore: insert claimed: %w", errHolderVanished)
}

// mayInsertClaimed reports whether params may be claimed as it is
// inserted, judged before the round trip: a plain job due at once (a
// past or present RunAt is checked by the statement against now()) of a
// kind without sequences whose flow settings allow it
// (FlowConfig.InsertsClaimable).
func (s *Store) mayInsertClaimed(ctx context.Context, params *store.InsertParams) bool {
	if params.Delay > 0 || len(params.FollowUps) > 0 || params.SequenceKey != "" || params.PendingLimit > 0 {
		return false
	}
	if !params.RunAt.IsZero() && params.RunAt.After(time.Now().Add(time.Second)) {
		return false // far in the future on any clock this Store's host keeps
	}
	snap, err := s.flowKinds(ctx)
	if err != nil {
		return false // Insert reports it
	}
	if snap.seqKinds[params.Kind] {
		return false
	}
	return snap.kinds[params.Kind].InsertsClaimable()
}
