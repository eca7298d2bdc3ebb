package storetest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// Texts no Store can keep (PostgreSQL refuses both in text and JSON).
const (
	withNUL     = "a\x00b"
	invalidUTF8 = "a\xffb"
)

// testValidation checks that every Store refuses, at its boundary and
// before writing anything, what some Store could not keep (store.CheckText,
// store.CheckMetadata, store.CheckTime and the size and number limits), with
// an error wrapping store.ErrInvalidParams.
func testValidation(t *testing.T, newStore NewStoreFunc) {
	t.Run("Insert", func(t *testing.T) { testInsertValidation(t, newStore) })
	t.Run("InsertLimitsAccepted", func(t *testing.T) { testInsertLimitsAccepted(t, newStore) })
	t.Run("Finish", func(t *testing.T) { testFinishValidation(t, newStore) })
	t.Run("Claim", func(t *testing.T) { testClaimValidation(t, newStore) })
	t.Run("HeartbeatNode", func(t *testing.T) { testNodeValidation(t, newStore) })
	t.Run("OtherTexts", func(t *testing.T) { testOtherTexts(t, newStore) })
}

func testInsertValidation(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name string
		mod  func(*store.InsertParams)
	}{
		{"KindNUL", func(p *store.InsertParams) { p.Kind = withNUL }},
		{"KindInvalidUTF8", func(p *store.InsertParams) { p.Kind = invalidUTF8 }},
		{"UniqueKeyNUL", withUniqueKey(withNUL)},
		{"UniqueKeyInvalidUTF8", withUniqueKey(invalidUTF8)},
		{"UniqueKeyTooLong", withUniqueKey(strings.Repeat("u", store.MaxUniqueKeyLength+1))},
		{"MetadataKeyNUL", func(p *store.InsertParams) { p.Metadata = map[string]string{withNUL: "v"} }},
		{"MetadataKeyInvalidUTF8", func(p *store.InsertParams) { p.Metadata = map[string]string{invalidUTF8: "v"} }},
		{"MetadataEmptyKey", func(p *store.InsertParams) { p.Metadata = map[string]string{"": "v"} }},
		{"MetadataValueNUL", func(p *store.InsertParams) { p.Metadata = map[string]string{"k": withNUL} }},
		{"MetadataValueInvalidUTF8", func(p *store.InsertParams) { p.Metadata = map[string]string{"k": invalidUTF8} }},
		{"MetadataTooLarge", func(p *store.InsertParams) {
			p.Metadata = map[string]string{"k": strings.Repeat("v", store.MaxMetadataSize)}
		}},
		{"PayloadNULByte", func(p *store.InsertParams) { p.Payload = []byte("{\"a\":\"" + withNUL + "\"}") }},
		{"PayloadInvalidUTF8", func(p *store.InsertParams) { p.Payload = []byte("{\"a\":\"" + invalidUTF8 + "\"}") }},
		{"PayloadEmpty", func(p *store.InsertParams) { p.Payload = []byte{} }},
		{"RunAtYear300000", withRunAt(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC))},
		{"RunAtYear0", withRunAt(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))},
		{"RunAtAfterMaxTime", withRunAt(store.MaxTime.Add(time.Second))},
		{"RunAtBeforeMinTime", withRunAt(store.MinTime.Add(-time.Second))},
		// MaxAttemptsLimit + 1, written so that it also compiles where
		// int has 32 bits (there it wraps, and is refused as negative).
		{"MaxAttemptsAboveInt32", func(p *store.InsertParams) { p.MaxAttempts = store.MaxAttemptsLimit; p.MaxAttempts++ }},
		{"MaxAttemptsMaxInt", withMaxAttempts(math.MaxInt)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			bad := params(t, "valid.bad", c.mod)
			first := params(t, "valid.ok", withUniqueKey("valid-first"))
			plain := params(t, "valid.ok")
			// Alone, and in a batch with valid rows (a Store may write
			// one row and many rows in different ways).
			for _, batch := range [][]store.InsertParams{{bad}, {first, bad, plain}, {first, plain, bad}} {
				_, err := st.Insert(t.Context(), batch)
				require.ErrorIs(t, err, store.ErrInvalidParams)
			}
			requireNotFound(t, st, bad.ID)
			requireNotFound(t, st, first.ID)
			requireNotFound(t, st, plain.ID)
			require.Empty(t, claim(t, st, claimParams(10, longLease, "valid.ok", "valid.bad")).Jobs)
			requireNoJobs(t, st)
			// The keys were not taken either.
			insert(t, st, params(t, "valid.ok", withUniqueKey("valid-first")))
		})
	}
}

// requireNoJobs requires that the store holds no job, when it can list
// them.
func requireNoJobs(t *testing.T, st store.Store) {
	t.Helper()
	l, ok := st.(store.Lister)
	if !ok {
		return
	}
	jobs, err := l.List(t.Context(), &store.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "an invalid call stored jobs")
}

func testInsertLimitsAccepted(t *testing.T, newStore NewStoreFunc) {
	st := newStore(t)
	cases := []struct {
		name  string
		mod   func(*store.InsertParams)
		check func(t *testing.T, p store.InsertParams, j *store.JobRecord)
	}{
		// store.MinTime itself is the zero time.Time, which InsertParams
		// reads as "no RunAt": the earliest absolute RunAt is just after.
		{"RunAtNearMinTime", withRunAt(store.MinTime.Add(time.Second)), func(t *testing.T, _ store.InsertParams, j *store.JobRecord) {
			requireTimeNear(t, store.MinTime.Add(time.Second), j.RunAt, 0)
			requireTimeNear(t, store.MinTime.Add(time.Second), j.ScheduledAt, 0)
		}},
		{"RunAtMaxTime", withRunAt(store.MaxTime), func(t *testing.T, _ store.InsertParams, j *store.JobRecord) {
			requireTimeNear(t, store.MaxTime, j.RunAt, 0)
			requireTimeNear(t, store.MaxTime, j.ScheduledAt, 0)
		}},
		{"MaxAttemptsLimit", withMaxAttempts(store.MaxAttemptsLimit), func(t *testing.T, _ store.InsertParams, j *store.JobRecord) {
			require.Equal(t, store.MaxAttemptsLimit, j.MaxAttempts)
		}},
		{"UniqueKeyMaxLength", withUniqueKey(strings.Repeat("ü", store.MaxUniqueKeyLength/2)), func(t *testing.T, p store.InsertParams, j *store.JobRecord) {
			require.Equal(t, p.UniqueKey, j.UniqueKey)
		}},
		{"MetadataMaxSize", func(p *store.InsertParams) {
			p.Metadata = map[string]string{"k": strings.Repeat("é", (store.MaxMetadataSize-1)/2)}
		}, func(t *testing.T, p store.InsertParams, j *store.JobRecord) {
			require.Equal(t, p.Metadata, j.Metadata)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := params(t, "valid.limits", c.mod)
			insert(t, st, p)
			c.check(t, p, get(t, st, p.ID))
		})
	}
}

func testFinishValidation(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name    string
		errText string
	}{
		{"ErrorNUL", "boom" + withNUL},
		{"ErrorInvalidUTF8", "boom" + invalidUTF8},
		{"ErrorTooLong", strings.Repeat("e", store.MaxErrorLength+1)},
	}
	outcomes := []store.Outcome{store.OutcomeRetry, store.OutcomeDead, store.OutcomeCancelled, store.OutcomeSucceeded}
	for _, c := range cases {
		for _, o := range outcomes {
			t.Run(c.name+"/"+o.String(), func(t *testing.T) {
				st := newStore(t)
				a := makeJob(t, st, store.StateRunning, "valid.finish")
				b := makeJob(t, st, store.StateRunning, "valid.finish")
				bad := makeJob(t, st, store.StateRunning, "valid.finish")
				_, err := st.Finish(t.Context(), []store.FinishParams{
					{Lease: lease(a), Outcome: store.OutcomeSucceeded},
					{Lease: lease(bad), Outcome: o, Error: c.errText},
					{Lease: lease(b), Outcome: store.OutcomeRetry, Error: "fine"},
				})
				require.ErrorIs(t, err, store.ErrInvalidParams)
				// The valid rows of the call were not applied either.
				requireUnchanged(t, st, a)
				requireUnchanged(t, st, b)
				requireUnchanged(t, st, bad)
			})
		}
	}
	t.Run("ErrorMaxLengthKept", func(t *testing.T) {
		st := newStore(t)
		running := makeJob(t, st, store.StateRunning, "valid.finish")
		text := strings.Repeat("é", store.MaxErrorLength/2)
		got := finishOne(t, st, running, store.FinishParams{Outcome: store.OutcomeDead, Error: text})
		requireErrors(t, got, []string{text}, []int{1})
	})
}

func testClaimValidation(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name  string
		owner string
	}{
		{"OwnerNUL", withNUL},
		{"OwnerInvalidUTF8", invalidUTF8},
		{"OwnerTooLong", strings.Repeat("o", store.MaxKindLength+1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			before := get(t, st, insertOne(t, st, "valid.claim"))
			p := claimParams(10, longLease, "valid.claim")
			p.Owner = c.owner
			_, err := st.Claim(t.Context(), p)
			require.ErrorIs(t, err, store.ErrInvalidParams)
			requireUnchanged(t, st, before)
		})
	}
}

func testNodeValidation(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name string
		mod  func(*store.NodeParams)
	}{
		{"NameNUL", func(p *store.NodeParams) { p.Name = withNUL }},
		{"NameInvalidUTF8", func(p *store.NodeParams) { p.Name = invalidUTF8 }},
		{"NameTooLong", func(p *store.NodeParams) { p.Name = strings.Repeat("n", store.MaxKindLength+1) }},
		{"VersionNUL", func(p *store.NodeParams) { p.Version = withNUL }},
		{"VersionInvalidUTF8", func(p *store.NodeParams) { p.Version = invalidUTF8 }},
		{"VersionTooLong", func(p *store.NodeParams) { p.Version = strings.Repeat("v", store.MaxKindLength+1) }},
		{"KindNUL", func(p *store.NodeParams) { p.Kinds = []string{"ok", withNUL} }},
		{"KindInvalidUTF8", func(p *store.NodeParams) { p.Kinds = []string{invalidUTF8} }},
		{"KeyIDEmpty", func(p *store.NodeParams) { p.KeyIDs = []string{"k1", ""} }},
		{"KeyIDNUL", func(p *store.NodeParams) { p.KeyIDs = []string{withNUL} }},
		{"KeyIDTooLong", func(p *store.NodeParams) { p.KeyIDs = []string{strings.Repeat("k", store.MaxKindLength+1)} }},
		{"TooManyKeyIDs", func(p *store.NodeParams) {
			for i := range store.MaxNodeKeys + 1 {
				p.KeyIDs = append(p.KeyIDs, fmt.Sprintf("k%d", i))
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			r := as[store.NodeRegistry](t, st)
			p := store.NodeParams{Name: "valid-node", Version: "v1", Kinds: []string{"k"}, TTL: longLease}
			c.mod(&p)
			require.ErrorIs(t, r.HeartbeatNode(t.Context(), &p), store.ErrInvalidParams)
			nodes, err := r.ListNodes(t.Context())
			require.NoError(t, err)
			require.Empty(t, nodes, "an invalid heartbeat registered a node")
		})
	}
}

// testOtherTexts checks the names the optional interfaces take: text that
// no Store can keep is refused with ErrInvalidParams (stores that cannot
// hold it must not answer "not found" for one call and fail another).
func testOtherTexts(t *testing.T, newStore NewStoreFunc) {
	cases := []struct {
		name string
		call func(ctx context.Context, t *testing.T, st store.Store) error
	}{
		{"AcquireLeaderName", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.Leaser](t, st).AcquireLeader(ctx, &store.LeaderParams{Name: withNUL, Holder: "h", TTL: longLease})
			return err
		}},
		{"AcquireLeaderHolder", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.Leaser](t, st).AcquireLeader(ctx, &store.LeaderParams{Name: leaderName, Holder: invalidUTF8, TTL: longLease})
			return err
		}},
		{"ReleaseLeader", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.Leaser](t, st).ReleaseLeader(ctx, leaderName, withNUL)
			return err
		}},
		{"StopNode", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.NodeRegistry](t, st).StopNode(ctx, withNUL)
			return err
		}},
		{"DeclarePeriodicName", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.PeriodicStore](t, st).DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: withNUL, Spec: "@every 1s"})
			return err
		}},
		{"DeclarePeriodicSpec", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.PeriodicStore](t, st).DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: "valid.periodic", Spec: invalidUTF8})
			return err
		}},
		{"FirePeriodicName", func(ctx context.Context, t *testing.T, st store.Store) error {
			p := fireParams(t, "valid.periodic", storeNow(t, st).Add(-time.Minute))
			p.Name = invalidUTF8
			_, err := as[store.PeriodicStore](t, st).FirePeriodic(ctx, p)
			return err
		}},
		{"FirePeriodicSpec", func(ctx context.Context, t *testing.T, st store.Store) error {
			p := fireParams(t, "valid.periodic", storeNow(t, st).Add(-time.Minute))
			p.Spec = withNUL
			_, err := as[store.PeriodicStore](t, st).FirePeriodic(ctx, p)
			return err
		}},
		{"PeriodicState", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.PeriodicStore](t, st).PeriodicState(ctx, withNUL)
			return err
		}},
		{"ClaimKind", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := st.Claim(ctx, claimParams(10, longLease, "valid", withNUL))
			return err
		}},
		{"ListKind", func(ctx context.Context, t *testing.T, st store.Store) error {
			_, err := as[store.Lister](t, st).List(ctx, &store.ListParams{Kind: withNUL, Limit: 10})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			require.ErrorIs(t, c.call(t.Context(), t, st), store.ErrInvalidParams)
			requireNoJobs(t, st)
		})
	}
	t.Run("NothingStored", func(t *testing.T) {
		// After the refused calls above, the valid ones find a clean
		// slate: no leader, no schedule.
		st := newStore(t)
		if l, ok := st.(store.Leaser); ok {
			_, err := l.AcquireLeader(t.Context(), &store.LeaderParams{Name: leaderName, Holder: withNUL, TTL: longLease})
			require.ErrorIs(t, err, store.ErrInvalidParams)
			require.True(t, acquire(t, l, leaderName, "h", longLease).Held, "a refused acquire took the lease")
		}
		if ps, ok := st.(store.PeriodicStore); ok {
			p := fireParams(t, "valid.periodic", storeNow(t, st).Add(-time.Minute))
			p.Spec = withNUL
			_, err := ps.FirePeriodic(t.Context(), p)
			require.ErrorIs(t, err, store.ErrInvalidParams)
			_, err = ps.PeriodicState(t.Context(), "valid.periodic")
			require.ErrorIs(t, err, store.ErrNotFound, "a refused fire stored the schedule")
			requireNotFound(t, st, p.Ticks[0].Job.ID)
		}
	})
}
