package axhttp

import (
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
)

// Listings read and send a bounded part of each job (ListPreviewBytes of
// its payload, result and latest error), so a page over jobs with 1 MB
// payloads costs the server megabytes, not gigabytes. The case,
// 1,000 dead jobs with 1 MB payloads, is listBoundFull jobs under
// AX_LIST_BOUND_FULL=1 (1 GB of payloads to generate: too slow for the
// suite); by default the test runs listBoundJobs jobs and checks the same
// bound per job.

const (
	listBoundFull = 1000
	listBoundJobs = 40
	// listBoundPerJob and listBoundFixed make the memory budget of one
	// request over n jobs: at 1,000 jobs, under 64 MB.
	listBoundPerJob = 60 << 10
	listBoundFixed  = 4 << 20
	// listBoundBodyPerJob bounds the bytes sent per listed job.
	listBoundBodyPerJob = 16 << 10
	// listBoundTime bounds each answer.
	listBoundTime = 2 * time.Second
)

func listBoundCount() int {
	if os.Getenv("AX_LIST_BOUND_FULL") == "1" {
		return listBoundFull
	}
	return listBoundJobs
}

// bigPayload is a 1 MB JSON payload (store.MaxPayloadSize).
func bigPayload() []byte {
	p := make([]byte, 0, store.MaxPayloadSize)
	p = append(p, `{"blob":"`...)
	p = append(p, strings.Repeat("0123456789abcdef", (store.MaxPayloadSize-12)/16)...)
	return append(p, `"}`...)
}

// bigError is a long attempt error (most of store.MaxErrorLength).
var bigError = "smtp: 550 mailbox full\n" + strings.Repeat("stack frame line\n", (store.MaxErrorLength-100)/17)

// fillDead inserts n dead jobs of kind "bulk.mail" with a 1 MB payload
// and a long error into st through the Store contract.
func fillDead(t *testing.T, st store.Store, n int) {
	t.Helper()
	ctx := t.Context()
	payload := bigPayload()
	for done := 0; done < n; {
		batch := min(n-done, 50)
		ps := make([]store.InsertParams, batch)
		for i := range ps {
			ps[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "bulk.mail", Payload: payload, Priority: store.PriorityNormal, MaxAttempts: 1}
		}
		_, err := st.Insert(ctx, ps)
		require.NoError(t, err)
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n1", Limit: batch, LeaseDuration: time.Hour, Kinds: []store.KindLimit{{Kind: "bulk.mail", Limit: batch}}})
		require.NoError(t, err)
		require.Len(t, res.Jobs, batch)
		fs := make([]store.FinishParams, batch)
		for i, j := range res.Jobs {
			fs[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeDead, Error: bigError}
		}
		_, err = st.Finish(ctx, fs)
		require.NoError(t, err)
		done += batch
	}
}

// fillDeadPG inserts n dead jobs as fillDead does, the first through the
// Store and the others as copies made by the server, so that generating a
// gigabyte of payloads does not cross the wire.
func fillDeadPG(t *testing.T, st store.Store, pool *pgxpool.Pool, n int) {
	t.Helper()
	fillDead(t, st, 1)
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE one ON COMMIT DROP AS SELECT * FROM ax.jobs_history`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO ax.jobs_history SELECT (jsonb_populate_record(one, jsonb_build_object('id', gen_random_uuid()))).*
		FROM one, generate_series(2, $1)`, n)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	var got int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE state = 'dead'`).Scan(&got))
	require.Equal(t, n, got, "dead jobs made")
}

// measured runs fn and returns the bytes the process allocated meanwhile
// (an upper bound of how much the heap grew) and how long it took.
func measured(fn func()) (uint64, time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	fn()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

func TestListingsBounded(t *testing.T) {
	n := listBoundCount()
	stores := []struct {
		name string
		make func(t *testing.T) store.Store
	}{
		{"memstore", func(t *testing.T) store.Store {
			st := memstore.New()
			fillDead(t, st, n)
			return st
		}},
		{"pgstore", func(t *testing.T) store.Store {
			pool := pgtest.Pool(t)
			st, err := pgstore.New(t.Context(), pool)
			require.NoError(t, err)
			fillDeadPG(t, st, pool, n)
			return st
		}},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{store: sc.make(t)})
			b := f.browser()
			b.login("app", testSecret)
			budget := uint64(listBoundFixed + n*listBoundPerJob)
			requests := []struct {
				name string
				do   func() (int, int)
			}{
				{"api", func() (int, int) {
					res, body := f.call(&f.app, http.MethodGet, "/api/v1/jobs?limit=1000", "")
					return res.StatusCode, len(body)
				}},
				{"jobs", func() (int, int) {
					res, body := b.get("/jobs?limit=1000")
					return res.StatusCode, len(body)
				}},
				{"dead", func() (int, int) {
					res, body := b.get("/dead")
					return res.StatusCode, len(body)
				}},
				{"deadKind", func() (int, int) {
					res, body := b.get("/dead?kind=bulk.mail")
					return res.StatusCode, len(body)
				}},
				{"overview", func() (int, int) {
					res, body := b.get("/")
					return res.StatusCode, len(body)
				}},
			}
			for _, rq := range requests {
				var status, size int
				alloc, took := measured(func() { status, size = rq.do() })
				t.Logf("%s, %d jobs of 1 MB: %d bytes sent, %.1f MB allocated, %s", rq.name, n, size, float64(alloc)/(1<<20), took)
				require.Equal(t, http.StatusOK, status, rq.name)
				require.Less(t, alloc, budget, "%s: allocated %d bytes over %d jobs", rq.name, alloc, n)
				require.Less(t, size, n*listBoundBodyPerJob+64<<10, "%s: sent %d bytes over %d jobs", rq.name, size, n)
				require.Less(t, took, listBoundTime, rq.name)
			}
		})
	}
}
