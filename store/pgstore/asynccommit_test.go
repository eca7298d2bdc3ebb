package pgstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestAsyncClaimsAndOutcomes: with WithAsyncClaimsAndOutcomes the claims
// and the transactions that write outcomes (Finish, with or without
// results, FinishFlow, retries and hand-backs as well as ends) commit
// with synchronous_commit off, and nothing else does: not inserts, not
// CompleteTx (its caller's transaction), not the next statement on any
// connection. Without the option every write keeps the server's setting.
// A trigger records the setting each write to jobs ran under.
func TestAsyncClaimsAndOutcomes(t *testing.T) {
	ctx := ctxT(t)
	pool := pgtest.PoolFor(t, pgtest.DSN(t))
	stores := map[bool]*pgstore.Store{}
	for _, async := range []bool{false, true} {
		var opts []pgstore.Option
		if async {
			opts = append(opts, pgstore.WithAsyncClaimsAndOutcomes())
		}
		s, err := pgstore.New(ctx, pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[async] = s
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE public.commit_seen (op text, sync text);
		CREATE FUNCTION public.record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.commit_seen VALUES (TG_OP, current_setting('synchronous_commit'));
			RETURN NULL;
		END $$;
		CREATE TRIGGER record_commit AFTER INSERT OR UPDATE OR DELETE ON ax.jobs
			FOR EACH ROW EXECUTE FUNCTION public.record_commit()`); err != nil {
		t.Fatal(err)
	}
	// seen returns the settings the writes since the last call ran under.
	seen := func(t *testing.T) map[string]bool {
		t.Helper()
		rows, _ := pool.Query(ctx, `DELETE FROM public.commit_seen RETURNING sync`)
		got := map[string]bool{}
		var sync string
		if _, err := pgx.ForEachRow(rows, []any{&sync}, func() error { got[sync] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}

	finish := func(t *testing.T, s *pgstore.Store, f store.FinishParams) bool {
		ok, err := s.Finish(ctx, []store.FinishParams{f})
		if err != nil {
			t.Fatal(err)
		}
		return ok[0]
	}
	ways := map[string]func(t *testing.T, s *pgstore.Store, f store.FinishParams) bool{
		"Finish": finish,
		"Finish with a result": func(t *testing.T, s *pgstore.Store, f store.FinishParams) bool {
			f.Result = json.RawMessage(`{"r":1}`)
			return finish(t, s, f)
		},
		"FinishFlow": func(t *testing.T, s *pgstore.Store, f store.FinishParams) bool {
			res, err := s.FinishFlow(ctx, []store.FinishParams{f})
			if err != nil {
				t.Fatal(err)
			}
			return res.OK[0]
		},
		"CompleteTx": func(t *testing.T, s *pgstore.Store, f store.FinishParams) bool {
			var ok bool
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				ok, err = s.CompleteTx(ctx, tx, f)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return ok
		},
	}
	cases := []struct {
		way     string
		outcome store.Outcome
		async   bool
		want    string // the setting the outcome's writes ran under
	}{
		{"Finish", store.OutcomeSucceeded, false, "on"},
		{"Finish", store.OutcomeSucceeded, true, "off"},
		{"Finish", store.OutcomeRetry, true, "off"},
		{"Finish", store.OutcomeRelease, true, "off"},
		{"Finish with a result", store.OutcomeSucceeded, false, "on"},
		{"Finish with a result", store.OutcomeSucceeded, true, "off"},
		{"FinishFlow", store.OutcomeDead, false, "on"},
		{"FinishFlow", store.OutcomeDead, true, "off"},
		{"CompleteTx", store.OutcomeSucceeded, true, "on"},
	}
	for _, c := range cases {
		name := c.way + "/" + c.outcome.String() + "/sync"
		if c.async {
			name = c.way + "/" + c.outcome.String() + "/async"
		}
		t.Run(name, func(t *testing.T) {
			s := stores[c.async]
			p := job("async")
			if _, err := s.Insert(ctx, []store.InsertParams{p}); err != nil {
				t.Fatal(err)
			}
			if got := seen(t); len(got) != 1 || !got["on"] {
				t.Fatalf("the insert ran under synchronous_commit %v, want on", got)
			}
			lease := claimOne(t, s, "async")
			wantClaim := map[bool]string{false: "on", true: "off"}[c.async]
			if got := seen(t); len(got) != 1 || !got[wantClaim] {
				t.Fatalf("the claim ran under synchronous_commit %v, want %s", got, wantClaim)
			}
			if !ways[c.way](t, s, store.FinishParams{Lease: lease, Outcome: c.outcome, Error: "e", Delay: time.Hour}) {
				t.Fatal("the outcome did not apply")
			}
			if got := seen(t); len(got) != 1 || !got[c.want] {
				t.Fatalf("the outcome's writes ran under synchronous_commit %v, want %s", got, c.want)
			}
			// The setting ended with its transaction, on every connection.
			for _, conn := range pool.AcquireAllIdle(ctx) {
				var sync string
				err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sync)
				conn.Release()
				if err != nil || sync != "on" {
					t.Fatalf("synchronous_commit after the finish: %q, %v", sync, err)
				}
			}
			if _, err := pool.Exec(ctx, `DELETE FROM ax.jobs WHERE kind = 'async'`); err != nil {
				t.Fatal(err)
			}
			seen(t)
		})
	}
}
