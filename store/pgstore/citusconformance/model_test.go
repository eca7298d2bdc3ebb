package citusconformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/storetest"
)

// TestCitusModel runs the model-based test on the Citus store with one
// shard and with eight (only eight under -race: raceShards), the second
// with a drained archive pass after every step, so that reads, run-now
// and unique keys meet archived jobs. The run with eight shards checks
// that every statement its stores ran routes to one shard, as
// TestCitusConformance's does.
func TestCitusModel(t *testing.T) {
	t.Parallel()
	for _, shards := range raceShards(1, 8) {
		c := struct {
			shards  int
			archive bool
		}{shards, shards > 1}
		t.Run(fmt.Sprintf("Shards%d", c.shards), func(t *testing.T) {
			t.Parallel()
			var log *statementLog
			if c.shards > 1 && !raceflag.Enabled {
				log = newStatementLog()
			}
			stores := citusStores(t, c.shards, log)
			if log != nil {
				t.Cleanup(func() { checkStatementsRoute(t, log, false) })
			}
			storetest.RunModel(t, func(t *testing.T) *storetest.ModelStore {
				st := stores(t).(*pgstore.CitusStore)
				ms := &storetest.ModelStore{Store: st}
				if c.archive {
					ms.AfterStep = func(ctx context.Context) error {
						for {
							n, err := st.Archive(ctx, 1000)
							if err != nil || n < 1000 {
								return err
							}
						}
					}
				}
				return ms
			}, storetest.ModelOptions{Seeds: 1, Steps: 200})
		})
	}
}
