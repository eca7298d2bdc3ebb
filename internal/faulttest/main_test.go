package faulttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/scenariolock"
)

var (
	binDir    string
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	// Never beside the other scenario package (internal/scenariolock).
	if err := scenariolock.Hold(); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "axfault")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// worker builds the worker binary once per test process (without -race:
// the workers are the system under test, the race detector would only
// slow them down) and returns its path.
func worker(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		workerBin = filepath.Join(binDir, "worker")
		cmd := exec.Command(goBin, "build", "-o", workerBin, "github.com/axsched/ax/internal/faulttest/worker")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = err
			workerBin = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build worker: %v\n%s", buildErr, workerBin)
	}
	return workerBin
}
