package faulttest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// loaderDir is where the deployment scenarios' client program lives, in
// this tree and in the previous release's, which the rolling upgrade
// builds with this tree's copy of it.
const loaderDir = "internal/deploytest/loader"

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
		"github.com/axsched/ax/internal/faulttest/worker", "github.com/axsched/ax/"+loaderDir)
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
