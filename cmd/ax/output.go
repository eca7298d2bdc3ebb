package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	if jw, ok := w.(jsonWatcher); ok {
		jw.watchJSON(v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonWatcher is a standard output that is also handed the Go values
// printJSON prints, not only their text: TestCLISurface derives each
// document's fields from the value's type, omitted-when-empty ones
// included, which the text alone cannot show. The binary's standard
// output is an *os.File, so this costs it one type assertion.
type jsonWatcher interface {
	watchJSON(v any)
}

// table writes aligned columns for people.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// when formats a time for a table: UTC, to the second; "-" when unset.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// whenMS formats a time for one job's details: UTC, RFC 3339 to the
// millisecond (2026-01-02T15:04:05.123Z); "-" when unset.
func whenMS(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// oneLine returns the first line of s, cut to max runes with an ellipsis,
// so that a stack trace or a long message keeps a table readable. Tabs
// would break the columns, so they become spaces.
func oneLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, "\t", " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// count formats a number, "-" for zero, so tables show what is there.
func count(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// byteSize formats a size in bytes for people: 312 B, 4.5 KiB, 1.0 MiB
// (what would print as 1024.0 KiB is 1.0 MiB).
func byteSize(n int) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	if kib := float64(n) / (1 << 10); kib < 1023.95 {
		return fmt.Sprintf("%.1f KiB", kib)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
