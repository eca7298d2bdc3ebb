package pgstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestFinishEndsJobsInTheHistory: a job that a Finish ends leaves jobs in
// that statement, straight into the history, unless something keeps it in
// the hot table: a unique key it still holds, follow-ups, a batch, a
// sequence (triggers act on those ends), a result written after the
// outcome, or an outcome that does not end it. Each case runs through
// Finish, FinishFlow (what the runtime calls) and CompleteTx.
func TestFinishEndsJobsInTheHistory(t *testing.T) {
	type prep func(t *testing.T, s *pgstore.Store, p *store.InsertParams)
	none := func(*testing.T, *pgstore.Store, *store.InsertParams) {}
	cases := []struct {
		name    string
		prep    prep
		outcome store.Outcome
		result  bool // the finish records a result
		cancel  bool // a cancel is requested while it runs
		want    string
	}{
		{"succeeded", none, store.OutcomeSucceeded, false, false, "history"},
		{"dead", none, store.OutcomeDead, false, false, "history"},
		{"cancelled", none, store.OutcomeCancelled, false, false, "history"},
		{"retry cancelled by request", none, store.OutcomeRetry, false, true, "history"},
		{"retry", none, store.OutcomeRetry, false, false, "jobs"},
		{"snooze", none, store.OutcomeSnooze, false, false, "jobs"},
		{"release", none, store.OutcomeRelease, false, false, "jobs"},
		{"key released at its end", func(_ *testing.T, _ *pgstore.Store, p *store.InsertParams) {
			p.UniqueKey = "k-" + p.ID.String()
		}, store.OutcomeSucceeded, false, false, "history"},
		{"key kept while finished", func(_ *testing.T, _ *pgstore.Store, p *store.InsertParams) {
			p.UniqueKey, p.Unique = "k-"+p.ID.String(), store.UniqueScope{Finished: true}
		}, store.OutcomeSucceeded, false, false, "jobs"},
		{"key kept while finished, cancelled", func(_ *testing.T, _ *pgstore.Store, p *store.InsertParams) {
			p.UniqueKey, p.Unique = "k-"+p.ID.String(), store.UniqueScope{Finished: true}
		}, store.OutcomeCancelled, false, false, "history"},
		{"period key", func(_ *testing.T, _ *pgstore.Store, p *store.InsertParams) {
			p.UniqueKey, p.Unique = "k-"+p.ID.String(), store.UniqueScope{Period: time.Hour}
		}, store.OutcomeDead, false, false, "jobs"},
		{"follow-ups", func(_ *testing.T, _ *pgstore.Store, p *store.InsertParams) {
			p.FollowUps = []store.FollowUp{{On: []store.State{store.StateDead}, Job: store.InsertParams{Kind: "after", Priority: 1, MaxAttempts: 1}}}
		}, store.OutcomeSucceeded, false, false, "jobs"},
		{"result", none, store.OutcomeSucceeded, true, false, "jobs"},
	}
	ways := []struct {
		name   string
		finish func(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool
	}{
		{"Finish", func(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool {
			ok, err := s.Finish(ctxT(t), []store.FinishParams{f})
			if err != nil {
				t.Fatal(err)
			}
			return ok[0]
		}},
		{"FinishFlow", func(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool {
			res, err := s.FinishFlow(ctxT(t), []store.FinishParams{f})
			if err != nil {
				t.Fatal(err)
			}
			return res.OK[0]
		}},
		{"CompleteTx", func(t *testing.T, s *pgstore.Store, pool *pgxpool.Pool, f store.FinishParams) bool {
			var ok bool
			err := pgx.BeginFunc(ctxT(t), pool, func(tx pgx.Tx) error {
				var err error
				ok, err = s.CompleteTx(ctxT(t), tx, f)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}},
	}
	s, pool := historyStore(t)
	ctx := ctxT(t)
	for _, w := range ways {
		for _, c := range cases {
			t.Run(w.name+"/"+c.name, func(t *testing.T) {
				p := job("move")
				c.prep(t, s, &p)
				if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
					t.Fatal(err)
				}
				lease := claimOne(t, s, "move")
				if c.cancel {
					if _, err := s.Control(ctx, p.ID, store.OpCancel); err != nil {
						t.Fatal(err)
					}
				}
				f := store.FinishParams{Lease: lease, Outcome: c.outcome, Error: "e", Delay: time.Hour}
				if c.result {
					f.Result = json.RawMessage(`{"r":1}`)
				}
				if !w.finish(t, s, pool, f) {
					t.Fatal("the outcome did not apply")
				}
				if got := where(t, pool, p.ID); got != c.want {
					t.Fatalf("job in %s, want %s", got, c.want)
				}
				// Whatever the table, reads see the job as its outcome
				// left it, and its lease reads finished by its holder.
				j, err := s.Get(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if c.want == "history" && (!j.State.Final() || j.FinishedAt.IsZero() || !j.LeaseExpiresAt.IsZero()) {
					t.Fatalf("moved job reads %+v", j)
				}
				ext, err := s.ExtendLeases(ctx, &store.ExtendParams{Leases: []store.Lease{lease}, Duration: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if c.want == "history" && len(ext.Finished) != 1 {
					t.Fatalf("extension after the end: %+v, want it finished by its holder", ext)
				}
				// Whatever a job ends in, its ID leaves the claim: clean
				// up the ones that stay claimable for the next case.
				if _, err := pool.Exec(ctx, `DELETE FROM ax.jobs WHERE kind = 'move' AND state IN ('scheduled', 'retrying')`); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestFinishMoveKeepsEveryColumn: the history row a Finish writes for the
// job it ends is the row as it was, with only what finishing writes
// changed, for every column of jobs (those reads scan and those they do
// not). The insert lists its columns (historyColumns), so a column
// missing from it would come out as its default.
func TestFinishMoveKeepsEveryColumn(t *testing.T) {
	s, pool := historyStore(t)
	ctx := ctxT(t)
	p := job("cols")
	p.Metadata = map[string]string{"m": "v"}
	p.UniqueKey = "released"
	if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
		t.Fatal(err)
	}
	// Values no default gives, in columns no insert of this test sets.
	if _, err := pool.Exec(ctx, `UPDATE ax.jobs SET pending_counted = true, partition_key = 'p', unique_window = 7,
		errors = '[{"attempt": 0, "at": "2026-01-01T00:00:00Z", "error": "old"}]' WHERE id = $1`, [16]byte(p.ID)); err != nil {
		t.Fatal(err)
	}
	lease := claimOne(t, s, "cols")
	before := rowAsMap(t, pool, "jobs", p.ID)
	if ok, err := s.Finish(ctx, []store.FinishParams{{Lease: lease, Outcome: store.OutcomeDead, Error: "boom"}}); err != nil || !ok[0] {
		t.Fatalf("finish: %v, %v", ok, err)
	}
	if got := where(t, pool, p.ID); got != "history" {
		t.Fatalf("job in %s, want history", got)
	}
	after := rowAsMap(t, pool, "jobs_history", p.ID)
	written := map[string]bool{}
	for _, c := range pgstore.FinishSetColumns() {
		written[c] = true
	}
	for col, v := range before {
		if written[col] {
			continue
		}
		if string(after[col]) != string(v) {
			t.Errorf("column %s: %s before the finish, %s in the history", col, v, after[col])
		}
	}
	if len(after) != len(before) {
		t.Errorf("the history row has %d columns, jobs %d", len(after), len(before))
	}
	for col, want := range map[string]string{"state": `"dead"`, "lease_expires_at": `null`, "cancel_requested": `false`} {
		if string(after[col]) != want {
			t.Errorf("column %s in the history: %s, want %s", col, after[col], want)
		}
	}
	var errs []map[string]any
	if err := json.Unmarshal(after["errors"], &errs); err != nil || len(errs) != 2 || errs[1]["error"] != "boom" {
		t.Errorf("errors in the history: %s (%v)", after["errors"], err)
	}
}

// TestFinishMovesWithoutKnownPartitions: a Finish (or a FinishClaim,
// whose one-trip path meets the missing partition and falls back) moves
// the jobs it ends into the history once it has made its day's partition
// (here a fresh database has none), and when that partition is dropped
// under it (by hand), the call that meets the missing partition still
// applies, and the next one moves jobs again.
func TestFinishMovesWithoutKnownPartitions(t *testing.T) {
	for _, c := range []struct {
		name   string
		finish func(ctx context.Context, s *pgstore.Store, fin []store.FinishParams) ([]bool, error)
	}{
		{"Finish", func(ctx context.Context, s *pgstore.Store, fin []store.FinishParams) ([]bool, error) {
			return s.Finish(ctx, fin)
		}},
		{"FinishClaim", func(ctx context.Context, s *pgstore.Store, fin []store.FinishParams) ([]bool, error) {
			fr, _, err := s.FinishClaim(ctx, fin, &store.ClaimParams{Owner: "n",
				Kinds: []store.KindLimit{{Kind: "parts", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
			if err != nil {
				return nil, err
			}
			return fr.OK, nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) { testFinishMovesWithoutKnownPartitions(t, c.finish) })
	}
}

func testFinishMovesWithoutKnownPartitions(t *testing.T, finish func(context.Context, *pgstore.Store, []store.FinishParams) ([]bool, error)) {
	s, pool := historyStore(t)
	ctx := ctxT(t)
	finishOne := func(t *testing.T) uuid.UUID {
		t.Helper()
		p := job("parts")
		if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
			t.Fatal(err)
		}
		lease := claimOne(t, s, "parts")
		if ok, err := finish(ctx, s, []store.FinishParams{{Lease: lease, Outcome: store.OutcomeSucceeded}}); err != nil || !ok[0] {
			t.Fatalf("finish: %v, %v", ok, err)
		}
		return p.ID
	}
	if got := where(t, pool, finishOne(t)); got != "history" {
		t.Fatalf("first job in %s, want history", got)
	}
	rows, _ := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'ax.jobs_history'::regclass`)
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(parts) < 1 {
		t.Fatalf("partitions %v, %v", parts, err)
	}
	for _, part := range parts {
		if _, err := pool.Exec(ctx, `DROP TABLE ax.`+pgx.Identifier{part}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	if got := where(t, pool, finishOne(t)); got != "history" {
		t.Fatalf("job finished after the drop in %s, want history", got)
	}
}

// claimOne claims the one due job of kind and returns its lease.
func claimOne(t *testing.T, s *pgstore.Store, kind string) store.Lease {
	t.Helper()
	res, err := s.Claim(ctxT(t), &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}},
		Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	return store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken}
}

// rowAsMap returns every column of job id in table, by name, as JSON.
func rowAsMap(t *testing.T, pool *pgxpool.Pool, table string, id uuid.UUID) map[string]json.RawMessage {
	t.Helper()
	var row map[string]json.RawMessage
	if err := pool.QueryRow(ctxT(t), `SELECT to_jsonb(j) FROM ax.`+table+` j WHERE id = $1`, [16]byte(id)).Scan(&row); err != nil {
		t.Fatal(err)
	}
	return row
}
