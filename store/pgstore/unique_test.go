package pgstore_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// TestConcurrentUniqueInserts races single and batch inserts of the same
// unique keys: each key gets exactly one job, and every caller learns its ID.
func TestConcurrentUniqueInserts(t *testing.T) {
	cases := []struct {
		name  string
		batch int // rows per Insert call: 1 takes the one-statement path
	}{
		{"Single", 1},
		{"Batch", 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			ctx := ctxT(t)
			const workers, keys = 8, 20
			results := make([][]store.InsertResult, workers)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for k := 0; k < keys; k += c.batch {
						var ps []store.InsertParams
						for i := k; i < k+c.batch; i++ {
							p := job("uniq")
							p.UniqueKey = "key-" + string(rune('a'+i))
							ps = append(ps, p)
						}
						if w%2 == 1 { // opposite key orders must not deadlock
							slices.Reverse(ps)
						}
						res, err := s.Insert(ctx, ps)
						if err != nil {
							errs <- err
							return
						}
						if w%2 == 1 {
							slices.Reverse(res)
						}
						results[w] = append(results[w], res...)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k := range keys {
				var holder uuid.UUID
				inserted := 0
				for w := range workers {
					r := results[w][k]
					if !r.Duplicate {
						inserted++
					}
					if holder == uuid.Nil {
						holder = r.ID
					}
					if r.ID != holder {
						t.Fatalf("key %d: IDs %s and %s", k, holder, r.ID)
					}
				}
				if inserted != 1 {
					t.Fatalf("key %d inserted %d times", k, inserted)
				}
			}
		})
	}
}
