package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestReportLeavesOutUndefinedFigures checks that a figure which is no
// number (a ratio over an interval that ran no job) becomes a note and the
// report still writes as JSON: the wide scenario once lost its whole report
// to a +Inf in a -quick run on a busy machine.
func TestReportLeavesOutUndefinedFigures(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    float64
		kept bool
	}{
		{"finite", 1.5, true},
		{"zero", 0, true},
		{"plus infinity", math.Inf(1), false},
		{"minus infinity", math.Inf(-1), false},
		{"not a number", math.NaN(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResult(nil)
			r.add("ratio", tc.v, "×")
			r.atLeast("checked ratio", tc.v, "×", 1)
			var buf bytes.Buffer
			if err := r.writeJSON(&buf); err != nil {
				t.Fatalf("writeJSON: %v", err)
			}
			var back result
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatalf("read back: %v", err)
			}
			if got := len(back.Metrics) == 2; got != tc.kept {
				t.Errorf("metrics %v, want kept=%v", back.Metrics, tc.kept)
			}
			noted := len(back.Notes) == 2 && strings.Contains(back.Notes[0], "ratio: undefined")
			if noted == tc.kept {
				t.Errorf("notes %q, want a note for each undefined figure: %v", back.Notes, !tc.kept)
			}
		})
	}
}
