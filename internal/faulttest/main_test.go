package faulttest

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the programs the scenarios build, for one test process.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "axfault")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// worker builds this tree's worker once per test process (without -race:
// the workers are the system under test, the race detector would only
// slow them down; see currentBins) and returns its path.
func worker(t *testing.T) string {
	t.Helper()
	return filepath.Join(currentBins(t), "worker")
}
