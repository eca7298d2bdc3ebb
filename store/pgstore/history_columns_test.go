package pgstore_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// catalogColumns returns the columns of table in the ax schema, in order,
// each as "name type".
func catalogColumns(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, _ := pool.Query(ctxT(t), `SELECT attname || ' ' || format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
		"ax."+table)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// rowsAsJSON returns every column of the jobs ids in table, one JSON
// object per job.
func rowsAsJSON(t *testing.T, pool *pgxpool.Pool, table string, ids []uuid.UUID) map[uuid.UUID]string {
	t.Helper()
	rows, _ := pool.Query(ctxT(t), `SELECT id, to_jsonb(j)::text FROM ax.`+table+` j WHERE id = ANY($1)`, pgtest.IDs(ids))
	out := map[uuid.UUID]string{}
	var (
		id  uuid.UUID
		row string
	)
	if _, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id), &row}, func() error { out[id] = row; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHistoryCarriesEveryColumn: the history and the hot table have the
// same columns in the same order (the view over both and the moves rely on
// it), every column is read or listed as unread with its reason, and a
// move to the history and a restore from it carry every column of a row
// unchanged. The history once lost unique_window this way: a hand-kept
// column list that lacked it.
func TestHistoryCarriesEveryColumn(t *testing.T) {
	s, pool := historyStore(t)
	ctx := ctxT(t)

	hot := catalogColumns(t, pool, "jobs")
	if hist := catalogColumns(t, pool, "jobs_history"); !slices.Equal(hot, hist) {
		t.Fatalf("jobs and jobs_history differ:\njobs:         %v\njobs_history: %v", hot, hist)
	}
	read, unread := pgstore.JobColumns()
	for _, c := range hot {
		name, _, _ := strings.Cut(c, " ")
		if !slices.Contains(read, name) && unread[name] == "" {
			t.Errorf("column %s of jobs is neither read (jobColumns) nor listed in unreadColumns", name)
		}
	}

	// Jobs whose every column carries a value a default would not give:
	// period keys (unique_window), the flows' pending mark, a parent,
	// metadata, errors, a lease that ended.
	var ids []uuid.UUID
	for _, outcome := range []store.Outcome{store.OutcomeDead, store.OutcomeSucceeded} {
		ids = append(ids, finishAs(t, s, "cols", []store.Outcome{outcome, outcome}, "k",
			store.UniqueScope{Global: true, Period: time.Hour})...)
	}
	if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET pending_counted = true, metadata = '{"m":"v"}',
		partition_key = 'p', sequence_key = 's', finished_at = finished_at - interval '2 hours'
		WHERE id = ANY($1)`, pgtest.IDs(ids)); err != nil {
		t.Fatal(err)
	}
	before := rowsAsJSON(t, pool, "jobs", ids)
	for _, id := range ids {
		if row := before[id]; row == "" || strings.Contains(row, `"unique_window": 0`) || !strings.Contains(row, `"pending_counted": true`) {
			t.Fatalf("job %s is not the row the test needs: %s", id, row)
		}
	}
	s.RewindArchive()
	if n := archiveAll(t, s); n != len(ids) {
		t.Fatalf("archived %d jobs, want %d", n, len(ids))
	}
	if moved := rowsAsJSON(t, pool, "jobs_history", ids); !maps.Equal(before, moved) {
		t.Fatalf("a move to the history changed rows:\nbefore: %v\nafter:  %v", before, moved)
	}
	if n, err := s.Restore(ctx, ids); err != nil || n != len(ids) {
		t.Fatalf("restore: %d, %v", n, err)
	}
	if back := rowsAsJSON(t, pool, "jobs", ids); !maps.Equal(before, back) {
		t.Fatalf("a restore from the history changed rows:\nbefore: %v\nafter:  %v", before, back)
	}
}

// TestArchivedPeriodKeysRunAgain: two dead jobs with the same key and
// period, in different windows, archived, then run again by hand, one by
// one and in bulk. With the history losing unique_window both came back in
// window 0, and the second run-now failed with a raw unique violation.
func TestArchivedPeriodKeysRunAgain(t *testing.T) {
	cases := []struct {
		name  string
		again func(t *testing.T, s *pgstore.Store, ids []uuid.UUID)
	}{
		{"control", func(t *testing.T, s *pgstore.Store, ids []uuid.UUID) {
			for _, id := range ids {
				if _, err := s.Control(ctxT(t), id, store.OpRunNow); err != nil {
					t.Fatalf("run-now of %s: %v", id, err)
				}
			}
		}},
		{"bulk", func(t *testing.T, s *pgstore.Store, ids []uuid.UUID) {
			n, err := s.Bulk(ctxT(t), &store.BulkParams{Op: store.BulkRunNow, Limit: 10,
				Filter: store.JobFilter{Kinds: []string{"period"}, States: []store.State{store.StateDead}}})
			if err != nil || n != len(ids) {
				t.Fatalf("bulk run-now: %d of %d, %v", n, len(ids), err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, pool := historyStore(t)
			ctx := ctxT(t)
			scope := store.UniqueScope{Period: time.Minute}
			a := job("period")
			a.UniqueKey, a.Unique = "report", scope
			if _, err := s.Insert(ctx, []store.InsertParams{a}); err != nil {
				t.Fatal(err)
			}
			// a's window is made the one before, so that b, inserted
			// now with the same key, gets a window of its own.
			if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET unique_window = unique_window - 1 WHERE id = $1`, [16]byte(a.ID)); err != nil {
				t.Fatal(err)
			}
			b := job("period")
			b.UniqueKey, b.Unique = "report", scope
			res, err := s.Insert(ctx, []store.InsertParams{b})
			if err != nil || res[0].Duplicate {
				t.Fatalf("insert b: %+v, %v", res, err)
			}
			ids := []uuid.UUID{a.ID, b.ID}
			killAll(t, s, "period", 2)
			if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET finished_at = finished_at - interval '1 hour' WHERE id = ANY($1)`, pgtest.IDs(ids)); err != nil {
				t.Fatal(err)
			}
			windows := rowsAsJSON(t, pool, "jobs", ids)
			s.RewindArchive()
			if n := archiveAll(t, s); n != 2 {
				t.Fatalf("archived %d jobs, want 2", n)
			}
			c.again(t, s, ids)
			for _, id := range ids {
				j, err := s.Get(ctx, id)
				if err != nil || j.State != store.StateScheduled {
					t.Fatalf("job %s after run-now: %+v, %v", id, j, err)
				}
			}
			var got []int64
			if err := pool.QueryRow(ctx, `SELECT array_agg(unique_window ORDER BY id) FROM ax.jobs WHERE id = ANY($1)`, pgtest.IDs(ids)).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got[0] == 0 || got[1] != got[0]+1 {
				t.Fatalf("windows after run-now %v; before the history %v", got, windows)
			}
		})
	}
}

// TestBulkRestoresOnlyWhatItChanges: a bulk run-now of fewer jobs than the
// history holds, and one that leaves a job alone because another holds its
// key, leave every job they did not change in the history. They used to
// stay in jobs with an old finished_at, behind every later archive pass.
func TestBulkRestoresOnlyWhatItChanges(t *testing.T) {
	s, pool := historyStore(t)
	ctx := ctxT(t)
	ids := finishAs(t, s, "bulk", []store.Outcome{store.OutcomeDead, store.OutcomeDead, store.OutcomeDead,
		store.OutcomeDead, store.OutcomeDead}, "", store.UniqueScope{})
	// The third job has a key a live job holds: a run-now leaves it.
	if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET unique_key = 'taken' WHERE id = $1`, [16]byte(ids[2])); err != nil {
		t.Fatal(err)
	}
	holder := job("bulk")
	holder.UniqueKey = "taken"
	if _, err := s.Insert(ctx, []store.InsertParams{holder}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET finished_at = finished_at - interval '1 hour' WHERE id = ANY($1)`, pgtest.IDs(ids)); err != nil {
		t.Fatal(err)
	}
	s.RewindArchive()
	if n := archiveAll(t, s); n != len(ids) {
		t.Fatalf("archived %d jobs, want %d", n, len(ids))
	}
	dead := store.JobFilter{Kinds: []string{"bulk"}, States: []store.State{store.StateDead}}
	n, err := s.Bulk(ctx, &store.BulkParams{Op: store.BulkRunNow, Limit: 1, Filter: dead})
	if err != nil || n != 1 {
		t.Fatalf("bulk run-now of one: %d, %v", n, err)
	}
	want := []string{"jobs", "history", "history", "history", "history"}
	assertWhere(t, pool, ids, want)

	// The next two: the first is changed, the second left alone (its key
	// is held); the pick stops at Limit 2 on the fourth.
	n, err = s.Bulk(ctx, &store.BulkParams{Op: store.BulkRunNow, Limit: 2, Filter: dead})
	if err != nil || n != 2 {
		t.Fatalf("bulk run-now of two: %d, %v", n, err)
	}
	assertWhere(t, pool, ids, []string{"jobs", "jobs", "history", "jobs", "history"})

	// One by one: a run-now refused for the key goes back too.
	if _, err := s.Control(ctx, ids[2], store.OpRunNow); !errors.Is(err, store.ErrWrongState) {
		t.Fatalf("run-now of the job whose key is held: %v, want ErrWrongState", err)
	}
	assertWhere(t, pool, ids, []string{"jobs", "jobs", "history", "jobs", "history"})
}

// assertWhere checks which table holds each of ids.
func assertWhere(t *testing.T, pool *pgxpool.Pool, ids []uuid.UUID, want []string) {
	t.Helper()
	got := make([]string, len(ids))
	for i, id := range ids {
		got[i] = where(t, pool, id)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("jobs are in %v, want %v", got, want)
	}
}

// killAll claims the n jobs of kind and finishes them dead.
func killAll(t *testing.T, s *pgstore.Store, kind string, n int) {
	t.Helper()
	ctx := ctxT(t)
	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: n}},
		Limit: n, LeaseDuration: time.Minute})
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("claim: %d jobs, %v", len(res.Jobs), err)
	}
	fs := make([]store.FinishParams, n)
	for i, j := range res.Jobs {
		fs[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeDead, Error: "e"}
	}
	if ok, err := s.Finish(ctx, fs); err != nil || len(ok) != n {
		t.Fatalf("finish: %v, %v", ok, err)
	}
}

// TestMigrateRepairsLostWindows: migration 0009 gives the rows that went
// through the history of an older release (unique_window 0 with a period)
// the window of their insert again, in the history and in jobs, and leaves
// a row of jobs whose repaired window another job holds as it was instead
// of failing.
func TestMigrateRepairsLostWindows(t *testing.T) {
	pool := pgtest.PoolFor(t, pgtest.EmptyDSN(t))
	ctx := ctxT(t)
	if err := pgstore.MigrateTo(ctx, pool, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, historyPartitionsSQL); err != nil {
		t.Fatal(err)
	}
	const period = 3600
	created := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	window := created.Unix() / period
	type row struct {
		table, state, key string
		win               int64
		want              int64
	}
	rows := []row{
		{"jobs_history", "dead", "h", 0, window},                    // lost in a move
		{"jobs_history", "succeeded", "ok", window - 1, window - 1}, // never lost
		{"jobs", "scheduled", "back", 0, window},                    // restored, then run again
		{"jobs", "dead", "twice", window, window},                   // holds the key in its window
		{"jobs", "scheduled", "twice", 0, 0},                        // would collide: left as it was
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = uuid.Must(uuid.NewV7())
		var finished *time.Time
		if r.state == "dead" || r.state == "succeeded" {
			f := created.Add(time.Minute)
			finished = &f
		}
		if _, err := pool.Exec(ctx, `INSERT INTO ax.`+r.table+` (id, kind, payload, state, priority, run_at, scheduled_at,
			attempt, max_attempts, unique_key, unique_period, unique_window, created_at, finished_at)
			VALUES ($1, 'w', '{}', $2, 2, $3, $3, 1, 3, $4, $5, $6, $3, $7)`,
			[16]byte(ids[i]), r.state, created, r.key, period, r.win, finished); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, r := range rows {
		var got int64
		if err := pool.QueryRow(ctx, `SELECT unique_window FROM ax.jobs_all WHERE id = $1`, [16]byte(ids[i])).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != r.want {
			t.Errorf("row %d (%s %s %q): window %d, want %d", i, r.table, r.state, r.key, got, r.want)
		}
	}
}

// TestRunNowRespectsArchivedHolder: a job that holds a Period key in its
// window and was moved to the history (once the period had passed since
// it finished) still holds it: a run-now of a cancelled job of the same
// key and window, one by one or in bulk, leaves it alone. The unique
// index covers the hot table alone, and the run-now took the key a second
// time (found by the model test, step 177 of a CI run).
func TestRunNowRespectsArchivedHolder(t *testing.T) {
	s, pool := historyStore(t)
	ctx := ctxT(t)
	scope := store.UniqueScope{Period: time.Hour}
	b := job("held")
	b.UniqueKey, b.Unique = "k", scope
	if _, err := s.Insert(ctx, []store.InsertParams{b}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Control(ctx, b.ID, store.OpCancel); err != nil {
		t.Fatal(err)
	}
	a := job("held")
	a.UniqueKey, a.Unique = "k", scope
	if res, err := s.Insert(ctx, []store.InsertParams{a}); err != nil || res[0].Duplicate {
		t.Fatalf("insert a: %+v, %v", res, err)
	}
	// a succeeds, and its finish is made older than the period so that
	// Archive moves it (b, cancelled, moves too).
	res, err := s.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "held", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim: %v %v", res, err)
	}
	if _, err := s.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: a.ID, Token: res.Jobs[0].LeaseToken}, Outcome: store.OutcomeSucceeded}}); err != nil {
		t.Fatal(err)
	}
	// As if both were inserted 3 hours ago, in that hour's window, and a
	// finished 2 hours ago.
	if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET unique_window = unique_window - 3,
		finished_at = CASE WHEN id = $1 THEN finished_at - interval '2 hours' ELSE finished_at END
		WHERE id IN ($1, $2)`, [16]byte(a.ID), [16]byte(b.ID)); err != nil {
		t.Fatal(err)
	}
	s.RewindArchive()
	archiveAll(t, s)
	assertWhere(t, pool, []uuid.UUID{a.ID, b.ID}, []string{"history", "history"})

	n, err := s.Bulk(ctx, &store.BulkParams{Op: store.BulkRunNow, Limit: 10,
		Filter: store.JobFilter{Kinds: []string{"held"}, States: []store.State{store.StateCancelled}}})
	if err != nil || n != 0 {
		t.Fatalf("bulk run-now of b: %d changed, %v; want 0", n, err)
	}
	if _, err := s.Control(ctx, b.ID, store.OpRunNow); !errors.Is(err, store.ErrWrongState) {
		t.Fatalf("run-now of b: %v, want ErrWrongState", err)
	}
	assertWhere(t, pool, []uuid.UUID{a.ID, b.ID}, []string{"history", "history"})
	if j, err := s.Get(ctx, b.ID); err != nil || j.State != store.StateCancelled {
		t.Fatalf("b: %+v, %v", j, err)
	}
}
