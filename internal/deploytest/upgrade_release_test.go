package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository's top directory (this package is two levels
// down).
const repoRoot = "../.."

// release is a section of CHANGELOG.md for a released version.
type release struct {
	version, commit string
}

var (
	releaseHeading = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`)
	releaseCommit  = regexp.MustCompile(`\bcommit ([0-9a-f]{40})\b`)
)

// releases reads every released version from CHANGELOG.md, newest first,
// with the commit its section names ("commit <40 hex digits>"; "" when it
// names none).
func releases(t *testing.T) []release {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	heads := releaseHeading.FindAllStringSubmatchIndex(text, -1)
	var out []release
	for i, h := range heads {
		end := len(text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		r := release{version: text[h[2]:h[3]]}
		if m := releaseCommit.FindStringSubmatch(text[h[1]:end]); m != nil {
			r.commit = m[1]
		}
		out = append(out, r)
	}
	return out
}

// git runs git in the repository.
func git(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repoRoot}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &buildError{err: err, out: strings.TrimSpace(stderr.String())}
	}
	return strings.TrimSpace(string(out)), nil
}

// needHistory skips t when this checkout has no git history to build a
// release from (a source archive, a shallow clone), unless
// AX_REQUIRE_POSTGRES=1 (CI, which clones in full), where it fails.
func needHistory(t *testing.T, commit string) {
	t.Helper()
	if _, err := git("cat-file", "-e", commit+"^{commit}"); err != nil {
		shallow, _ := git("rev-parse", "--is-shallow-repository")
		missing(t, "git history with commit "+commit+" is not available (shallow clone: "+shallow+"; fetch with git fetch --unshallow): "+err.Error())
	}
}

// TestChangelogNamesReleaseCommits: every release in CHANGELOG.md names
// its commit, which exists and is an ancestor of HEAD, so that the
// upgrade scenario builds what was released.
func TestChangelogNamesReleaseCommits(t *testing.T) {
	rs := releases(t)
	if len(rs) == 0 {
		t.Fatal("CHANGELOG.md lists no release")
	}
	for _, r := range rs {
		t.Run(r.version, func(t *testing.T) {
			if r.commit == "" {
				t.Fatalf("the [%s] section of CHANGELOG.md names no commit (\"commit <40 hex digits>\")", r.version)
			}
			needHistory(t, r.commit)
			if _, err := git("merge-base", "--is-ancestor", r.commit, "HEAD"); err != nil {
				t.Fatalf("release %s's commit %s is not an ancestor of HEAD: %v", r.version, r.commit, err)
			}
		})
	}
}

var (
	releaseMu   sync.Mutex
	releaseBins = map[string]string{}
)

// releaseBinaries builds the worker and the loader of a released commit,
// once per test process: the commit's tree (git archive) with this tree's
// loader added (it uses only API of the first release), built into a
// temporary directory. Go's build cache keeps later builds quick.
func releaseBinaries(t *testing.T, commit string) string {
	t.Helper()
	needHistory(t, commit)
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if dir, ok := releaseBins[commit]; ok {
		return dir
	}
	src := filepath.Join(binDir, "src-"+commit[:12])
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", repoRoot, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var archErr bytes.Buffer
	archive.Stderr = &archErr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar %s: %v", commit, err)
	}
	loader, err := os.ReadFile("loader/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "internal/deploytest/loader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "internal/deploytest/loader/main.go"), loader, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(binDir, "release-"+commit[:12])
	if err := goBuild(src, out); err != nil {
		t.Fatalf("build release %s: %v", commit, err)
	}
	releaseBins[commit] = out
	return out
}
