package ax_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docClaims are things the code does not do, which docs once said it did.
// The behaviour itself is checked where it lives (the reference named
// with each); this keeps every doc comment, README and page of the
// repository from saying the opposite again.
var docClaims = []struct {
	wrong *regexp.Regexp
	code  string // what the code does, and the test that checks it
}{
	{
		wrong: regexp.MustCompile(`(?i)attempts?( counter)?( are| is)? reset|reset(s|ting)? (the |its |their )?attempt|attempt (counter|count) back to`),
		code:  "a run-now (RunNow, RetryJobs, BulkRunNow) numbers attempts on: storetest Bulk and the memstore transition test",
	},
	{
		wrong: regexp.MustCompile(`(?i)implements every (optional )?(store )?interface|every store interface`),
		code:  "no store implements every optional interface: the README's capability table says which, checked by cmd/internal/capabilities",
	},
	{
		wrong: regexp.MustCompile(`(?i)(listener('s)?( connection)? is the only (one|connection)|only (one|connection) pgstore opens outside the pool)`),
		code:  "pgstore opens two connections outside the pool, the listener's and the lease connection: store/pgstore TestExtendLeasesOutsideThePool",
	},
}

// TestDocsSayWhatTheCodeDoes walks the repository's Go files and Markdown
// and fails on a sentence that contradicts what the code does.
func TestDocsSayWhatTheCodeDoes(t *testing.T) {
	for _, c := range docClaims {
		err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || path == filepath.Join("docs", "benchmarks")) {
					return filepath.SkipDir
				}
				return nil
			}
			if ext := filepath.Ext(path); ext != ".go" && ext != ".md" && ext != ".html" && ext != ".tmpl" || path == "docs_test.go" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				if c.wrong.MatchString(line) {
					t.Errorf("%s:%d says %q; the code: %s", path, i+1, strings.TrimSpace(line), c.code)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompatibilityListsTheAPISurface: docs/compatibility.md's package
// table names exactly the packages .ci/apicheck compares with the last
// release (.ci/api-surface), so the promise and its check cannot drift.
func TestCompatibilityListsTheAPISurface(t *testing.T) {
	surface, err := os.ReadFile(filepath.Join(".ci", "api-surface"))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, line := range strings.Split(string(surface), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
			checked[fields[1]] = true
		}
	}
	doc, err := os.ReadFile(filepath.Join("docs", "compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(github\\.com/axsched/ax[^`]*)` \\|")
	listed := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	if len(checked) == 0 || len(listed) == 0 {
		t.Fatalf("found %d packages in .ci/api-surface and %d in docs/compatibility.md", len(checked), len(listed))
	}
	for p := range checked {
		if !listed[p] {
			t.Errorf("%s is checked by .ci/apicheck but not listed in docs/compatibility.md", p)
		}
	}
	for p := range listed {
		if !checked[p] {
			t.Errorf("%s is promised in docs/compatibility.md but .ci/api-surface does not check it", p)
		}
	}
}
