package pgstore_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/citustest"
)

// TestCitusHotStatementsOnOneShard reads Citus's EXPLAIN of every
// statement the Citus store runs on a shard (insert, claim, extend,
// finish, rescue, archive, prune and control, as the store renders them
// for one slot) on a custom plan and on the generic plan, and fails on
// any that Citus would run as more than one task. On the generic plan
// Citus refuses some (the INSERT … SELECTs: "parameters in SQL
// functions"), which is allowed only for a statement the store does not
// force onto its generic plan: with plan_cache_mode at its default, Citus
// prices its generic plans out and every execution gets a custom one
// (seen: 8 executions of a prepared move, 8 custom plans, 0 generic).
// The claim runs forced generic (endsettings.go): it must route there.
//
// The list is kept by hand. Every statement the store actually runs in
// the conformance suite and the model test is checked the same way by
// store/pgstore/citusconformance (checkStatementsRoute), which a
// statement missing here cannot slip past.
func TestCitusHotStatementsOnOneShard(t *testing.T) {
	t.Parallel()
	_, _, st := citusStore(t)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, citustest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	sqls := st.CitusHotSQL(3)
	forcedGeneric := forcedGenericOnCitus
	for _, name := range slices.Sorted(maps.Keys(sqls)) {
		for _, mode := range []string{"custom", "generic"} {
			if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_`+mode+`_plan`); err != nil {
				t.Fatal(err)
			}
			got := probe(t, ctx, conn, name, sqls[name])
			refusedOK := mode == "generic" && !forcedGeneric[name] && strings.HasPrefix(got, "refused: ")
			if got != "tasks: 1" && !refusedOK {
				t.Errorf("%s, %s plan: %s, want one task\n%s", name, mode, got, sqls[name])
			}
		}
	}
}
