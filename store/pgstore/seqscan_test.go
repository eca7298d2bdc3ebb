package pgstore_test

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The plan tests check that a statement reads jobs, and its history's
// partitions, through indexes. A statement that looks in the history
// for recent rows (insert-claimed's guard) scans an empty partition
// sequentially, whatever its indexes: right after midnight UTC the new
// day's partition is empty, and a check for "Seq Scan on jobs" failed on
// "Seq Scan on jobs_history_p20261207" in a local run of .ci/run at
// 00:07 UTC on 2026-12-07.

var (
	seqScanRE    = regexp.MustCompile(`Seq Scan on (jobs\w*)`)
	actualRowsRE = regexp.MustCompile(`actual time=\S+ rows=(\d+)`)
)

// seqScans returns the relations of jobs and of its history (jobs_history
// and its partitions) that plan, EXPLAIN's text, reads sequentially. In a
// plan from EXPLAIN ANALYZE, a sequential scan that returned no row,
// touched no buffer and removed no row by its filter read an empty
// relation and does not count; without ANALYZE every one counts.
func seqScans(plan string) []string {
	lines := strings.Split(plan, "\n")
	var rels []string
	for i, line := range lines {
		m := seqScanRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !slices.Contains(rels, m[1]) && !emptyScan(lines, i) {
			rels = append(rels, m[1])
		}
	}
	return rels
}

// emptyScan reports whether the plan node on lines[i], from EXPLAIN
// ANALYZE, returned, read and removed nothing.
func emptyScan(lines []string, i int) bool {
	m := actualRowsRE.FindStringSubmatch(lines[i])
	if m == nil {
		return false // no ANALYZE: nothing says the relation is empty
	}
	if n, err := strconv.Atoi(m[1]); err != nil || n > 0 {
		return false
	}
	indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
	for _, l := range lines[i+1:] {
		body := strings.TrimLeft(l, " ")
		if body == "" || len(l)-len(body) <= indent || strings.HasPrefix(body, "->") {
			break // the node's own lines end here
		}
		if strings.HasPrefix(body, "Buffers:") || strings.HasPrefix(body, "Rows Removed by Filter:") {
			return false
		}
	}
	return true
}

// TestSeqScans: sequential scans of jobs and of its history count, in
// plans with and without ANALYZE, unless EXPLAIN ANALYZE shows the
// relation empty.
func TestSeqScans(t *testing.T) {
	cases := []struct {
		name string
		plan string
		want []string
	}{
		{"index scans only", `
Limit (actual time=0.1..0.2 rows=1 loops=1)
  ->  Index Scan using jobs_claim_idx on jobs j (actual time=0.1..0.2 rows=1 loops=1)
        Buffers: shared hit=4`, nil},
		{"jobs read", `
Limit (actual time=0.1..9.2 rows=0 loops=1)
  ->  Seq Scan on jobs j (actual time=9.1..9.1 rows=0 loops=1)
        Filter: (kind = 'k'::text)
        Rows Removed by Filter: 250000
        Buffers: shared hit=4000`, []string{"jobs"}},
		{"a history partition that returned rows", `
Append (actual time=0.1..0.2 rows=3 loops=1)
  ->  Seq Scan on jobs_history_p20261206 h (actual time=0.1..0.2 rows=3 loops=1)`, []string{"jobs_history_p20261206"}},
		{"an empty partition, then jobs read", `
Append (actual time=0.2..0.3 rows=0 loops=1)
  ->  Index Scan using jobs_history_p20261206_finished_at_idx on jobs_history_p20261206 h_1 (actual time=0.01..0.01 rows=0 loops=1)
        Buffers: shared hit=3
  ->  Seq Scan on jobs_history_p20261207 h_2 (actual time=0.004..0.004 rows=0 loops=1)
        Filter: ((finished_at >= now()) AND (id = '01a24dd5-c2ea-707d-b47c-fdbfe48bbf4c'::uuid))
  ->  Seq Scan on jobs w (actual time=0.1..0.1 rows=0 loops=1)
        Buffers: shared hit=1`, []string{"jobs"}},
		{"without ANALYZE", `
Append
  ->  Seq Scan on jobs_history_p20261207 h_2
        Filter: (id = $1)`, []string{"jobs_history_p20261207"}},
		{"another table", `
Seq Scan on flows f (actual time=0.1..0.1 rows=5 loops=1)`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := seqScans(c.plan); !slices.Equal(got, c.want) {
				t.Errorf("seqScans = %v, want %v", got, c.want)
			}
		})
	}
}
