package pgstore_test

import "testing"

// TestBulkRunNowIsSetBased checks that Bulk's run-now still finds the
// guard of Control's run-now statement it widens to an array of IDs:
// otherwise it falls back to one run per job, correct but several times
// slower.
func TestBulkRunNowIsSetBased(t *testing.T) {
	if !newStore(t).BulkRunNowIsSetBased() {
		t.Fatal("Control's run-now statement no longer selects its job with `WHERE id = $1 AND`: update runNowOneGuard in bulk.go")
	}
}
