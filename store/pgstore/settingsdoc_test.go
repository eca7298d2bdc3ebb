package pgstore_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocListsEverySetting: the package doc's list of the transaction
// settings the Store sets (the "Settings:" item, which says what a pooled
// server connection may see) names every setting the code and the
// migrations set with set_config or SET LOCAL. The list is written by
// hand; this keeps it from falling behind the code.
func TestDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	item := string(doc)
	start := strings.Index(item, "//   - Settings:")
	if start < 0 {
		t.Fatal(`doc.go has no "Settings:" item`)
	}
	item = item[start:]
	item = item[:strings.Index(item[1:], "//   - ")+1]
	item = strings.Join(strings.Fields(strings.ReplaceAll(item, "//", " ")), " ")

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sqls, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	set := regexp.MustCompile(`set_config\('([a-z_.]+)'|SET LOCAL ([a-z_.]+)`)
	found := map[string][]string{}
	for _, f := range append(files, sqls...) {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range set.FindAllStringSubmatch(string(src), -1) {
			name := m[1] + m[2]
			if !slices.Contains(found[name], f) {
				found[name] = append(found[name], f)
			}
		}
	}
	if len(found) < 5 {
		t.Fatalf("found only %v: the pattern no longer matches the code", found)
	}
	for name, where := range found {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(item) {
			t.Errorf("%s is set in %v but doc.go's Settings item does not name it", name, where)
		}
	}
}
