package axhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
)

// TestAPIJobsDeriveTheSameColumns (issue 40; the HTTP paths of
// internal/e2e's TestInsertPathsDeriveTheSameColumns, which cannot import
// this module): a job submitted through POST /api/v1/jobs and through
// POST /api/v1/jobs/batch, to a server whose Scheduler runs no handler,
// gets the columns the store derives (the partition key from the kind's
// PartitionBy, priority and attempts from the kind's defaults, which a
// worker host declared, the unique key and its scope) exactly as
// Schedule's job of the same kind does, on memstore and on PostgreSQL.
func TestAPIJobsDeriveTheSameColumns(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memstore", func(t *testing.T) store.Store { return memstore.New() }},
		{"pgstore", func(t *testing.T) store.Store {
			st, err := pgstore.New(t.Context(), pgtest.Pool(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		}},
	}
	type derived struct {
		PartitionKey string
		Priority     int
		MaxAttempts  int
		UniqueKey    string
		Unique       store.UniqueScope
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			// The worker host: it declares the kind's partition source and
			// defaults when it starts.
			worker, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), Node: "worker"})
			require.NoError(t, err)
			require.NoError(t, worker.Handle("ip.job", ax.HandlerFunc(func(context.Context, *ax.Job) error {
				return errors.New("never runs: the jobs are due in an hour")
			}), ax.PartitionBy(ax.PartitionByMetadata("tenant"), ax.PartitionLimit{Concurrency: 5}),
				ax.MaxAttempts(7), ax.Priority(ax.High)))
			require.NoError(t, worker.Start(t.Context()))
			t.Cleanup(func() { _ = worker.Stop(context.Background()) })

			f := newFixture(t, fixtureOptions{store: st})
			scheduled, err := f.s.Schedule(t.Context(), "ip.job", map[string]int{"n": 0},
				ax.Metadata(map[string]string{"tenant": "t-42"}), ax.UniqueKey("u-0"), ax.In(time.Hour))
			require.NoError(t, err)
			runAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			job := func(n int) string {
				return fmt.Sprintf(`{"kind":"ip.job","payload":{"n":%d},"metadata":{"tenant":"t-42"},"unique_key":"u-%d","run_at":%q}`,
					n, n, runAt)
			}
			res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", job(1))
			require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
			var one SubmitResponse
			require.NoError(t, json.Unmarshal(b, &one))
			res, b = f.call(&f.app, "POST", APIPrefix+"/jobs/batch", `{"jobs":[`+job(2)+`,`+job(3)+`]}`)
			require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
			var batch BatchResponse
			require.NoError(t, json.Unmarshal(b, &batch))
			require.Len(t, batch.Results, 2)

			of := func(id uuid.UUID) derived {
				rec, err := st.Get(t.Context(), id)
				require.NoError(t, err)
				return derived{rec.PartitionKey, rec.Priority, rec.MaxAttempts, rec.UniqueKey, rec.Unique}
			}
			want := of(scheduled.ID)
			require.Equal(t, derived{"t-42", int(ax.High), 7, "u-0", store.UniqueScope{}}, want, "Schedule's job")
			for i, id := range []uuid.UUID{one.ID, batch.Results[0].ID, batch.Results[1].ID} {
				got := of(id)
				require.Equal(t, fmt.Sprintf("u-%d", i+1), got.UniqueKey)
				got.UniqueKey = want.UniqueKey
				require.Equal(t, want, got, "API job %d", i+1)
			}
		})
	}
}
