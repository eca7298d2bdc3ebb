package deploytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/internal/scenariolock"
)

// binDir holds the programs the scenarios build, for one test process.
var binDir string

func TestMain(m *testing.M) {
	// Never beside the other scenario package (internal/scenariolock).
	if err := scenariolock.Hold(); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "axdeploybin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// skipUnderRace skips a scenario in a test binary built with -race: the
// system under test is the worker processes, built without it, and CI
// runs the package once without -race (go test ./...) as well, so a second
// run under -race would only double the scenarios' minutes.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceflag.Enabled {
		t.Skip("deployment scenarios run without -race (go test ./internal/deploytest); their processes are built without it anyway")
	}
}

// sideBySide lets a scenario run beside another (t.Parallel; go test
// runs two at a time by default, -parallel being GOMAXPROCS), after the
// scenarios that do not call it have run one at a time. The failover and
// upgrade scenarios mostly wait on the wall clock, each with servers,
// databases and ports of its own, and bound no time tighter than a
// minute. The PgBouncer scenarios do not call it: their leak checks
// (noLeaks) would count another scenario's goroutines.
func sideBySide(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// soak reports whether the long variants run (AX_SOAK=1).
func soak() bool { return os.Getenv("AX_SOAK") == "1" }

// goTool returns the go command.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

var (
	currentOnce sync.Once
	currentDir  string
	currentErr  error
)

// currentBins builds this tree's worker (internal/faulttest/worker) and
// loader once per test process (without -race: they are the system under
// test) and returns the directory holding them.
func currentBins(t *testing.T) string {
	t.Helper()
	currentOnce.Do(func() {
		currentDir = filepath.Join(binDir, "current")
		currentErr = goBuild(".", currentDir)
	})
	if currentErr != nil {
		t.Fatalf("build worker and loader: %v", currentErr)
	}
	return currentDir
}

// goBuild builds the worker and the loader of the module tree that holds
// dir (run from dir) into out.
func goBuild(dir, out string) error {
	cmd := exec.Command(goTool(), "build", "-o", out+string(filepath.Separator),
		"github.com/axsched/ax/internal/faulttest/worker", "github.com/axsched/ax/internal/deploytest/loader")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return &buildError{err: err, out: strings.TrimSpace(string(b))}
	}
	return nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// figure prints a scenario's figure in one greppable format.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), fmt.Sprintf(format, args...))
}
