package pgstore

import (
	"reflect"
	"strings"
	"testing"
)

// TestFlowQueriesSubstituted: every statement of flowQueries names the
// schema's tables, none a placeholder left from a list of fields kept by
// hand (a statement added to the struct but not to buildFlowQueries's
// list would run against "{jobs}" and fail only when first used).
func TestFlowQueriesSubstituted(t *testing.T) {
	q := buildFlowQueries("ax")
	v := reflect.ValueOf(q)
	for i := range v.NumField() {
		sql := v.Field(i).String()
		if sql == "" {
			t.Errorf("flowQueries.%s is empty", v.Type().Field(i).Name)
		}
		for _, ph := range []string{"{jobs}", "{history}", "{flows}", "{buckets}", "{deltas}", "{seqkinds}", "{verdicts}", "{pbreakers}", "{cols}", "{jcols}"} {
			if strings.Contains(sql, ph) {
				t.Errorf("flowQueries.%s still holds %s", v.Type().Field(i).Name, ph)
			}
		}
	}
}
