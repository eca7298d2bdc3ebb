package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memOpener opens one memstore for every command of a test, and a fake
// migrator.
type memOpener struct {
	st *memstore.Store
	m  *fakeMigrator
}

func (o memOpener) Store(context.Context, connection) (store.Store, func(), error) {
	return o.st, func() {}, nil
}

func (o memOpener) Migrator(context.Context, connection) (migrator, func(), error) {
	return o.m, func() {}, nil
}

// fakeMigrator is a schema at version db, for a binary at version bin.
type fakeMigrator struct{ db, bin int }

func (m *fakeMigrator) Up(context.Context) error {
	if m.db < m.bin {
		m.db = m.bin
	}
	return nil
}

func (m *fakeMigrator) Versions(context.Context) (int, int, error) { return m.db, m.bin, nil }

// terminal is a standard input that says it is a terminal, with the
// user's answer.
type terminal struct{ io.Reader }

func (terminal) IsTerminal() bool { return true }

// cluster is the store of the CLI tests:
//
//	email.send  3 dead (smtp: connection refused; tenants acme, acme, globex), 2 scheduled an hour ahead;
//	            flow settings: 5 running, 100/s, 2 per tenant, 1000 pending, a breaker (closed)
//	report.build 1 succeeded
//	periodic "nightly" (kind report.build, 0 3 * * *); node "worker-1" running email.send, leader
type cluster struct {
	st   *memstore.Store
	open memOpener
	dead []uuid.UUID // oldest first
	live []uuid.UUID
	done uuid.UUID
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx := t.Context()
	st := memstore.New()
	c := &cluster{st: st, open: memOpener{st: st, m: &fakeMigrator{db: 1, bin: 2}}}
	insert := func(kind string, delay time.Duration, md map[string]string) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{"to":"ada@example.com"}`),
			Priority: store.PriorityNormal, MaxAttempts: 1, Delay: delay, Metadata: md}})
		require.NoError(t, err)
		return id
	}
	finish := func(kind string, outcome store.Outcome, msg string) {
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "worker-1", Limit: 10, LeaseDuration: time.Minute,
			Kinds: []store.KindLimit{{Kind: kind, Limit: 10}}})
		require.NoError(t, err)
		for _, j := range res.Jobs {
			ok, err := st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: outcome, Error: msg}})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok)
		}
	}
	for _, tenant := range []string{"acme", "acme", "globex"} {
		c.dead = append(c.dead, insert("email.send", 0, map[string]string{"tenant": tenant}))
	}
	finish("email.send", store.OutcomeDead, "smtp: connection refused\ngoroutine 1 [running]")
	c.live = []uuid.UUID{insert("email.send", time.Hour, nil), insert("email.send", time.Hour, nil)}
	c.done = insert("report.build", 0, nil)
	finish("report.build", store.OutcomeSucceeded, "")
	_, err := st.DeclarePeriodic(ctx, &store.DeclarePeriodicParams{Name: "nightly", Spec: "0 3 * * *",
		Job: &store.InsertParams{Kind: "report.build", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 3}})
	require.NoError(t, err)
	require.NoError(t, st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker-1", Version: "v1", Kinds: []string{"email.send"}, TTL: time.Minute}))
	_, err = st.AcquireLeader(ctx, &store.LeaderParams{Name: "ax.maintenance", Holder: "worker-1", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, st.SetFlows(ctx, &store.SetFlowsParams{Node: "worker-1", Flows: []store.FlowConfig{{
		Kind: "email.send", Concurrency: 5, Rate: store.RateLimit{Limit: 100, Period: time.Second},
		Partition: store.PartitionSource{Metadata: "tenant"}, PartitionConcurrency: 2, MaxPending: 1000,
		Breaker:          store.BreakerConfig{Failures: 5, CoolDown: 30 * time.Second, MaxCoolDown: 10 * time.Minute},
		PartitionBreaker: store.BreakerConfig{Failures: 3, CoolDown: 30 * time.Second, MaxCoolDown: 10 * time.Minute},
	}}}))
	return c
}

// ax runs the CLI on the cluster with stdin and returns stdout, stderr
// and the exit code.
func (c *cluster) ax(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, stdin, &out, &errOut, c.open)
	return out.String(), errOut.String(), code
}

// snapshot returns every job as stored, to prove a command changed
// nothing.
func (c *cluster) snapshot(t *testing.T) []*store.JobRecord {
	t.Helper()
	page, err := c.st.ListJobs(t.Context(), &store.ListJobsParams{Limit: store.MaxListLimit})
	require.NoError(t, err)
	return page.Jobs
}

func (c *cluster) state(t *testing.T, id uuid.UUID) ax.State {
	t.Helper()
	j, err := c.st.Get(t.Context(), id)
	if err != nil {
		require.ErrorIs(t, err, store.ErrNotFound)
		return "deleted"
	}
	return j.State
}

// TestCommands runs every command, as a table for people and as JSON,
// and checks the output and what changed.
func TestCommands(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		stdin  io.Reader
		code   int
		out    []string // substrings of stdout
		errOut []string // substrings of stderr
		check  func(t *testing.T, c *cluster, out string)
	}{
		{name: "Help", args: []string{"help"}, out: []string{"jobs list", "Exit codes: 0 ok, 1 error, 2 usage, 3 not found."}},
		{name: "NoCommand", args: nil, code: exitUsage, errOut: []string{"Commands:"}},
		{name: "CommandHelp", args: []string{"jobs", "retry", "-h"}, out: []string{"Usage: ax jobs retry [ID...] [flags]", "-yes", "-error-contains"}},
		{name: "JobsListHelpSaysPreview", args: []string{"jobs", "list", "-h"}, out: []string{"Usage: ax jobs list [flags]", "in brief: payload size and preview",
			"-preview int", "0: their sizes only", "(default 64)"}},
		{name: "ServeHelpSaysSessionKey", args: []string{"serve", "-h"}, out: []string{"Usage: ax serve [flags]", "Environment:\n  AX_SESSION_KEY\n"}},

		{name: "MigrateStatus", args: []string{"migrate", "status"}, out: []string{"database at version 1, this binary at version 2: behind (run: ax migrate up)"}},
		{name: "MigrateStatusJSON", args: []string{"migrate", "status", "--json"}, check: jsonEq(`{"database":1,"binary":2,"status":"behind"}`)},
		{name: "MigrateUp", args: []string{"migrate", "up"}, out: []string{"schema ax migrated from version 1 to 2"},
			check: func(t *testing.T, c *cluster, _ string) { require.Equal(t, 2, c.open.m.db) }},
		{name: "MigrateUpJSON", args: []string{"--schema", "billing", "migrate", "up", "--json"}, check: jsonEq(`{"database":2,"binary":2,"status":"up-to-date","before":1}`)},

		{name: "JobsList", args: []string{"jobs", "list"}, out: []string{
			"ID", "KIND", "STATE", "ATTEMPT", "LAST ERROR", "email.send", "dead", "1/1", "smtp: connection refused", "report.build", "succeeded"},
			check: func(t *testing.T, c *cluster, out string) {
				require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1+6, "header and six jobs")
				require.NotContains(t, out, "goroutine", "only the first line of an error")
				require.Less(t, strings.Index(out, c.done.String()), strings.Index(out, c.dead[0].String()), "newest first")
			}},
		{name: "JobsListFiltered", args: []string{"jobs", "list", "--kind", "email.send", "--state=dead", "--meta", "tenant=acme", "--error-contains", "refused", "--node", "worker-1", "--priority", "normal", "--order", "oldest"},
			check: func(t *testing.T, c *cluster, out string) {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				require.Len(t, lines, 3)
				require.True(t, strings.HasPrefix(lines[1], c.dead[0].String()), "oldest first")
				require.True(t, strings.HasPrefix(lines[2], c.dead[1].String()))
			}},
		{name: "JobsListTimes", args: []string{"jobs", "list", "--run-after", "30m", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			var l ax.JobList
			require.NoError(t, json.Unmarshal([]byte(out), &l))
			require.Len(t, l.Jobs, 6, "everything ran or runs within 30 minutes of now or later")
		}},
		{name: "JobsListFinished", args: []string{"jobs", "list", "--finished-after", "2000-01-01T00:00:00Z", "--finished-before", "1m", "--state", "succeeded", "--json"},
			check: func(t *testing.T, c *cluster, out string) {
				var l ax.JobList
				require.NoError(t, json.Unmarshal([]byte(out), &l))
				require.Empty(t, l.Jobs, "finished less than a minute ago")
			}},
		{name: "JobsListPaged", args: []string{"jobs", "list", "--limit", "4"}, out: []string{"next page: --cursor "},
			check: func(t *testing.T, c *cluster, out string) {
				cursor := strings.TrimSpace(out[strings.LastIndex(out, "--cursor ")+len("--cursor "):])
				next, errOut, code := c.ax(t, nil, "jobs", "list", "--limit", "4", "--cursor", cursor)
				require.Zero(t, code, errOut)
				require.Len(t, strings.Split(strings.TrimSpace(next), "\n"), 1+2, "the last two jobs")
				require.NotContains(t, next, "next page")
				require.Contains(t, next, c.dead[0].String())
			}},
		{name: "JobsListJSON", args: []string{"--json", "jobs", "list", "--unique-key-prefix", "none"}, check: jsonEq(`{"jobs":[]}`)},
		{name: "JobsListJSONRecords", args: []string{"jobs", "list", "--json", "--limit", "1", "--order", "oldest"}, check: func(t *testing.T, c *cluster, out string) {
			var l map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &l))
			j := l["jobs"].([]any)[0].(map[string]any)
			require.Equal(t, c.dead[0].String(), j["id"])
			require.Equal(t, "dead", j["state"])
			require.Nil(t, j["payload"], "in brief")
			require.Equal(t, map[string]any{"payload": `{"to":"ada@example.com"}`, "payload_size": float64(24), "errors": float64(1)}, j["brief"])
			require.NotEmpty(t, l["cursor"])
		}},
		{name: "JobsListEmpty", args: []string{"jobs", "list", "--kind", "none"}, out: []string{"(no jobs)"}},

		{name: "JobsCount", args: []string{"jobs", "count"}, check: func(t *testing.T, c *cluster, out string) {
			require.Equal(t, "6\n", out, "every job, the number alone")
		}},
		{name: "JobsCountFiltered", args: []string{"jobs", "count", "--kind", "email.send", "--state=dead", "--meta", "tenant=acme",
			"--error-contains", "refused", "--node", "worker-1", "--priority", "normal", "--finished-after", "1h"}, check: func(t *testing.T, c *cluster, out string) {
			require.Equal(t, "2\n", out, "the filters of jobs list")
		}},
		{name: "JobsCountJSON", args: []string{"jobs", "count", "--state", "scheduled", "--json"}, check: jsonEq(`{"count":2}`)},
		{name: "JobsCountNone", args: []string{"jobs", "count", "--unique-key", "none"}, out: []string{"0\n"}},
		{name: "JobsListParent", args: []string{"jobs", "list", "--parent", "01a24a57-e687-70ca-ae74-daff69197b98", "--json"},
			check: func(t *testing.T, c *cluster, out string) {
				var l ax.JobList
				require.NoError(t, json.Unmarshal([]byte(out), &l))
				require.Empty(t, l.Jobs, "no job of the cluster was made by that one")
			}},
		{name: "JobsListBadParent", args: []string{"jobs", "list", "--parent", "01a24a57"}, code: exitUsage, errOut: []string{`--parent: "01a24a57" is not a job ID`}},
		{name: "JobsCountBadState", args: []string{"jobs", "count", "--state", "sleeping"}, code: exitUsage, errOut: []string{`--state: unknown state "sleeping"`}},
		{name: "JobsCountArgument", args: []string{"jobs", "count", "email.send"}, code: exitUsage, errOut: []string{"unexpected argument"}},

		{name: "JobsShow", args: []string{"jobs", "show"}, code: exitUsage, errOut: []string{"want one job ID"}},
		{name: "JobsShowDead", args: nil, check: func(t *testing.T, c *cluster, _ string) {
			out, errOut, code := c.ax(t, nil, "jobs", "show", c.dead[0].String())
			require.Zero(t, code, errOut)
			for _, want := range []string{"State:", "dead", "Attempt:", "1 of 1", "Owner:", "worker-1", "Metadata:", "tenant=acme",
				`{"to":"ada@example.com"}`, "smtp: connection refused", "    goroutine 1 [running]"} {
				require.Contains(t, out, want)
			}
			ms := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z` // RFC 3339 to the millisecond
			require.Regexp(t, "\nFinished at: +"+ms+"\n", out)
			require.Regexp(t, "\nAttempts:\n  #1  node worker-1  started "+ms+"  ended "+ms+` \(\d+(\.\d+)?m?s\)  failed:\n    smtp: connection refused\n    goroutine 1 \[running\]\n$`, out)
			out, _, code = c.ax(t, nil, "jobs", "show", c.dead[0].String(), "--json")
			require.Zero(t, code)
			var j map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &j))
			require.Equal(t, "dead", j["state"])
			require.NotContains(t, out, "0001-01-01")
			_, errOut, code = c.ax(t, nil, "jobs", "show", uuid.Must(uuid.NewV7()).String())
			require.Equal(t, exitNotFound, code)
			require.Contains(t, errOut, "not found")
		}},

		{name: "JobsShowSnoozed", args: nil, check: func(t *testing.T, c *cluster, _ string) {
			// A snooze gives its attempt back and records no error: the
			// count and time of the snoozes are its trace (issue 40).
			id := uuid.Must(uuid.NewV7())
			_, err := c.st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "webhook.deliver", Payload: []byte(`{}`),
				Priority: store.PriorityNormal, MaxAttempts: 3}})
			require.NoError(t, err)
			res, err := c.st.Claim(t.Context(), &store.ClaimParams{Owner: "worker-1", Limit: 1, LeaseDuration: time.Minute,
				Kinds: []store.KindLimit{{Kind: "webhook.deliver", Limit: 1}}})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			_, err = c.st.Finish(t.Context(), []store.FinishParams{{Lease: store.Lease{ID: id, Token: res.Jobs[0].LeaseToken},
				Outcome: store.OutcomeSnooze, Delay: time.Hour}})
			require.NoError(t, err)
			out, errOut, code := c.ax(t, nil, "jobs", "show", id.String())
			require.Zero(t, code, errOut)
			require.Contains(t, out, "Attempt:       0 of 3")
			require.Regexp(t, `\nSnoozed: +1 time\(s\), last at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n`, out)
			out, _, code = c.ax(t, nil, "jobs", "show", id.String(), "--json")
			require.Zero(t, code)
			var j ax.JobRecord
			require.NoError(t, json.Unmarshal([]byte(out), &j))
			require.Equal(t, 1, j.Snoozes)
			require.False(t, j.SnoozedAt.IsZero())
			out, _, code = c.ax(t, nil, "jobs", "show", c.dead[0].String())
			require.Zero(t, code)
			require.NotContains(t, out, "Snoozed:", "never snoozed: no line")
		}},

		{name: "JobsShowAttempts", args: nil, check: func(t *testing.T, c *cluster, _ string) {
			ms := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`
			out, errOut, code := c.ax(t, nil, "jobs", "show", c.done.String())
			require.Zero(t, code, errOut)
			require.Regexp(t, "\nAttempts:\n  #1  node worker-1  started "+ms+"  ended "+ms+` \(\d+(\.\d+)?.?s\)  succeeded\n$`, out)
			out, _, code = c.ax(t, nil, "jobs", "show", c.live[0].String())
			require.Zero(t, code)
			require.Contains(t, out, "\nAttempts:      none ended in an error\n")

			// A job failed on worker-1, then running on worker-2.
			id := uuid.Must(uuid.NewV7())
			_, err := c.st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "invoice.send", Payload: []byte(`{}`),
				Priority: store.PriorityNormal, MaxAttempts: 3}})
			require.NoError(t, err)
			for _, node := range []string{"worker-1", "worker-2"} {
				res, err := c.st.Claim(t.Context(), &store.ClaimParams{Owner: node, Limit: 1, LeaseDuration: time.Minute,
					Kinds: []store.KindLimit{{Kind: "invoice.send", Limit: 1}}})
				require.NoError(t, err)
				require.Len(t, res.Jobs, 1)
				if node == "worker-1" {
					_, err = c.st.Finish(t.Context(), []store.FinishParams{{Lease: store.Lease{ID: id, Token: res.Jobs[0].LeaseToken},
						Outcome: store.OutcomeRetry, Error: "timeout"}})
					require.NoError(t, err)
				}
			}
			out, errOut, code = c.ax(t, nil, "jobs", "show", id.String())
			require.Zero(t, code, errOut)
			require.Regexp(t, "\nAttempts:\n  #1  node worker-1  started "+ms+"  ended "+ms+` \([^)]+\)  failed:\n    timeout\n`+
				"  #2  node worker-2  started "+ms+"  running, lease until "+ms+"\n$", out)
			out, _, code = c.ax(t, nil, "jobs", "show", id.String(), "--json")
			require.Zero(t, code)
			var j ax.JobRecord
			require.NoError(t, json.Unmarshal([]byte(out), &j))
			require.Equal(t, "worker-1", j.Errors[0].Node, "the JSON has each attempt's node")
			require.False(t, j.Errors[0].StartedAt.IsZero())
		}},

		{name: "Retry", args: []string{"jobs", "retry", "--state", "dead", "--yes"}, out: []string{"retried 3 of 3 matching job(s)"},
			check: func(t *testing.T, c *cluster, _ string) {
				for _, id := range c.dead {
					require.Equal(t, ax.StateScheduled, c.state(t, id))
				}
			}},
		{name: "RetryByIDJSON", args: nil, check: func(t *testing.T, c *cluster, _ string) {
			out, errOut, code := c.ax(t, nil, "jobs", "retry", c.dead[2].String(), "--yes", "--json")
			require.Zero(t, code, errOut)
			jsonEq(`{"operation":"retry","matched":1,"changed":1}`)(t, c, out)
			require.Equal(t, ax.StateScheduled, c.state(t, c.dead[2]))
			require.Equal(t, ax.StateDead, c.state(t, c.dead[0]))
		}},
		{name: "RetryConfirmed", args: []string{"jobs", "retry", "--meta", "tenant=acme"}, stdin: terminal{strings.NewReader("y\n")},
			out: []string{"retried 2 of 2"}, errOut: []string{"Retry the 2 job(s) matching --meta=tenant=acme", "[y/N]"},
			check: func(t *testing.T, c *cluster, _ string) {
				require.Equal(t, ax.StateScheduled, c.state(t, c.dead[0]))
				require.Equal(t, ax.StateDead, c.state(t, c.dead[2]))
			}},
		{name: "RetryNothingMatches", args: []string{"jobs", "retry", "--kind", "none"}, out: []string{"no jobs match --kind=none: nothing to retry"}},
		{name: "Cancel", args: []string{"jobs", "cancel", "--kind", "email.send", "--yes"}, out: []string{"cancelled 2 of 5 matching job(s)"},
			check: func(t *testing.T, c *cluster, _ string) {
				for _, id := range c.live {
					require.Equal(t, ax.StateCancelled, c.state(t, id))
				}
				require.Equal(t, ax.StateDead, c.state(t, c.dead[0]))
			}},
		{name: "Delete", args: []string{"jobs", "delete", "--state", "dead", "--error-contains", "smtp", "--yes", "--batch", "2"}, out: []string{"deleted 3 of 3"},
			check: func(t *testing.T, c *cluster, _ string) {
				for _, id := range c.dead {
					require.Equal(t, ax.State("deleted"), c.state(t, id))
				}
				require.Equal(t, ax.StateSucceeded, c.state(t, c.done))
			}},
		{name: "DeleteAll", args: []string{"jobs", "delete", "--all", "--yes", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			jsonEq(`{"operation":"delete","matched":6,"changed":4}`)(t, c, out)
			require.Equal(t, ax.StateScheduled, c.state(t, c.live[0]), "live jobs stay")
		}},

		{name: "KindsList", args: []string{"kinds", "list"}, out: []string{"KIND", "STATUS", "email.send", "active", "worker-1", "report.build",
			"BREAKER", "LIMITS", "closed", "5 running, 100/1s, per tenant: 2 running, 1000 pending"}},
		{name: "KindsOpenClose", args: []string{"kinds", "open", "email.send"}, out: []string{"opened the breaker of kind email.send: no job of it starts until "},
			check: func(t *testing.T, c *cluster, _ string) {
				out, _, code := c.ax(t, nil, "kinds", "list")
				require.Zero(t, code)
				require.Contains(t, out, "open until ")
				out, _, code = c.ax(t, nil, "kinds", "list", "--json")
				require.Zero(t, code)
				var got struct{ Kinds []ax.KindState }
				require.NoError(t, json.Unmarshal([]byte(out), &got))
				require.Equal(t, ax.BreakerOpen, got.Kinds[0].Flow.Breaker.State)
				require.Equal(t, 5, got.Kinds[0].Flow.Config.Concurrency)
				out, _, code = c.ax(t, nil, "kinds", "close", "email.send", "--json")
				require.Zero(t, code)
				var f ax.FlowState
				require.NoError(t, json.Unmarshal([]byte(out), &f))
				require.Equal(t, ax.BreakerClosed, f.Breaker.State)
			}},
		{name: "KindsPartitionBreakers", args: []string{"kinds", "open-partition", "email.send", "acme"},
			out: []string{`opened the breaker of kind email.send partition "acme": none of its jobs starts until `},
			check: func(t *testing.T, c *cluster, _ string) {
				out, _, code := c.ax(t, nil, "kinds", "list")
				require.Zero(t, code)
				require.Contains(t, out, "closed, per tenant: 1 open", "the kind's breaker, then its open partitions")
				out, errOut, code := c.ax(t, nil, "kinds", "partitions", "email.send")
				require.Zero(t, code, errOut)
				require.Regexp(t, `PARTITION\s+BREAKER\s+RUNNING\s+CHANGED\n"acme"\s+open until \S+\s+-\s+\S+\n$`, out)
				out, _, code = c.ax(t, nil, "kinds", "partitions", "email.send", "--json")
				require.Zero(t, code)
				var got struct{ Partitions []ax.PartitionBreakerState }
				require.NoError(t, json.Unmarshal([]byte(out), &got))
				require.Len(t, got.Partitions, 1)
				require.Equal(t, "acme", got.Partitions[0].PartitionKey)
				require.Equal(t, ax.BreakerOpen, got.Partitions[0].Breaker.State)
				// Only acme's jobs are held: a claim takes globex's.
				_, err := c.st.Insert(t.Context(), []store.InsertParams{
					{ID: uuid.Must(uuid.NewV7()), Kind: "email.send", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1, Metadata: map[string]string{"tenant": "acme"}},
					{ID: uuid.Must(uuid.NewV7()), Kind: "email.send", Payload: []byte(`{}`), Priority: store.PriorityNormal, MaxAttempts: 1, Metadata: map[string]string{"tenant": "globex"}}})
				require.NoError(t, err)
				res, err := c.st.Claim(t.Context(), &store.ClaimParams{Owner: "worker-1", Limit: 10, LeaseDuration: time.Minute,
					Kinds: []store.KindLimit{{Kind: "email.send", Limit: 10}}})
				require.NoError(t, err)
				require.Len(t, res.Jobs, 1)
				require.Equal(t, "globex", res.Jobs[0].PartitionKey)

				out, _, code = c.ax(t, nil, "kinds", "close-partition", "email.send", "acme", "--json")
				require.Zero(t, code)
				var p ax.PartitionBreakerState
				require.NoError(t, json.Unmarshal([]byte(out), &p))
				require.Equal(t, ax.BreakerClosed, p.Breaker.State)
				out, _, code = c.ax(t, nil, "kinds", "partitions", "email.send")
				require.Zero(t, code)
				require.Contains(t, out, "(every partition of email.send is closed)")
			}},
		{name: "KindsPause", args: []string{"kinds", "pause", "email.send"}, out: []string{"paused kind email.send: hosts stop starting its jobs at once"},
			check: func(t *testing.T, c *cluster, _ string) {
				out, _, code := c.ax(t, nil, "kinds", "list", "--json")
				require.Zero(t, code)
				var got struct{ Kinds []ax.KindState }
				require.NoError(t, json.Unmarshal([]byte(out), &got))
				require.Equal(t, "email.send", got.Kinds[0].Kind)
				require.True(t, got.Kinds[0].Paused)
				require.Equal(t, int64(3), got.Kinds[0].Jobs[ax.StateDead])
				out, _, code = c.ax(t, nil, "kinds", "resume", "email.send")
				require.Zero(t, code)
				require.Contains(t, out, "resumed kind email.send")
			}},
		{name: "KindsPauseForce", args: []string{"kinds", "pause", "not.yet.deployed", "--force", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			var ks map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &ks))
			require.Equal(t, true, ks["paused"])
		}},
		{name: "KindsResumeNotPaused", args: []string{"kinds", "resume", "report.build"}, out: []string{"kind report.build was not paused"}},

		{name: "PeriodicList", args: []string{"periodic", "list"}, out: []string{"NAME", "nightly", "report.build", "0 3 * * *", "UTC", "active"},
			check: func(t *testing.T, c *cluster, out string) {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				require.Len(t, lines, 2)
				require.Regexp(t, `^nightly +report\.build +0 3 \* \* \* +UTC +never +\S+T03:00:00Z +active$`, lines[1], "never ticked")
				out, _, code := c.ax(t, nil, "periodic", "list", "--json")
				require.Zero(t, code)
				var l struct{ Schedules []map[string]any }
				require.NoError(t, json.Unmarshal([]byte(out), &l))
				require.Contains(t, l.Schedules[0], "last_tick")
				require.Nil(t, l.Schedules[0]["last_tick"], "null until a tick")
				// A schedule that ticked (an unknown one is created by its first tick).
				_, err := c.st.FirePeriodic(t.Context(), &store.FirePeriodicParams{Name: "hourly", Spec: "@hourly",
					Ticks: []store.PeriodicTick{{At: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}}})
				require.NoError(t, err)
				out, _, code = c.ax(t, nil, "periodic", "list")
				require.Zero(t, code)
				require.Regexp(t, `\nhourly +- +@hourly +UTC +2026-01-01T10:00:00Z `, out)
			}},
		{name: "PeriodicPauseResume", args: []string{"periodic", "pause", "nightly"}, out: []string{"paused schedule nightly"},
			check: func(t *testing.T, c *cluster, _ string) {
				out, _, code := c.ax(t, nil, "periodic", "list", "--json")
				require.Zero(t, code)
				require.Contains(t, out, `"paused": true`)
				out, _, code = c.ax(t, nil, "periodic", "resume", "nightly")
				require.Zero(t, code)
				require.Contains(t, out, "resumed schedule nightly: next tick ")
			}},
		{name: "PeriodicTrigger", args: []string{"periodic", "trigger", "nightly", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			var res triggerResult
			require.NoError(t, json.Unmarshal([]byte(out), &res))
			id := uuid.MustParse(res.JobID)
			j, err := c.st.Get(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, "report.build", j.Kind)
			require.Equal(t, "periodic:nightly:manual", j.UniqueKey)
			require.Equal(t, ax.TriggerManual, j.Metadata[ax.MetadataTrigger], "the handler can tell a manual run")
			out, _, code := c.ax(t, nil, "periodic", "trigger", "nightly")
			require.Zero(t, code)
			require.Equal(t, "not triggered: schedule nightly's previous manual run, job "+res.JobID+", has not ended (--force runs another)\n", out)
			out, _, code = c.ax(t, nil, "periodic", "trigger", "nightly", "--json")
			require.Zero(t, code)
			jsonEq(`{"schedule":"nightly","job_id":"`+res.JobID+`","duplicate":true}`)(t, c, out)
			out, _, code = c.ax(t, nil, "periodic", "trigger", "nightly", "--force")
			require.Zero(t, code)
			require.Regexp(t, `^triggered schedule nightly: job [0-9a-f-]{36}\n$`, out)
			require.NotContains(t, out, res.JobID)
		}},

		{name: "Nodes", args: []string{"nodes"}, out: []string{"NAME", "worker-1", "running", "yes", "v1", "email.send", "maintenance leader: worker-1 (term 1"}},
		{name: "NodesJSON", args: []string{"nodes", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			var res struct {
				Leader ax.Leader
				Nodes  []ax.Node
			}
			require.NoError(t, json.Unmarshal([]byte(out), &res))
			require.Equal(t, "worker-1", res.Leader.Node)
			require.True(t, res.Nodes[0].Leader)
		}},
		{name: "Stats", args: []string{"stats"}, out: []string{"KIND", "OLDEST DUE", "email.send", "report.build"}},
		{name: "StatsJSON", args: []string{"stats", "--json"}, check: func(t *testing.T, c *cluster, out string) {
			var st ax.Stats
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			require.Equal(t, int64(3), st.Queue["email.send"][ax.StateDead])
			require.True(t, st.QueueCounted)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			if tc.args == nil && tc.check != nil {
				tc.check(t, c, "")
				return
			}
			out, errOut, code := c.ax(t, tc.stdin, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, want := range tc.out {
				require.Contains(t, out, want)
			}
			for _, want := range tc.errOut {
				require.Contains(t, errOut, want)
			}
			if tc.check != nil {
				tc.check(t, c, out)
			}
		})
	}
}

// jsonEq checks that stdout is exactly one JSON document equal to want.
func jsonEq(want string) func(t *testing.T, c *cluster, out string) {
	return func(t *testing.T, _ *cluster, out string) {
		t.Helper()
		dec := json.NewDecoder(strings.NewReader(out))
		var doc json.RawMessage
		require.NoError(t, dec.Decode(&doc))
		require.False(t, dec.More(), "more than one JSON document")
		require.JSONEq(t, want, string(doc))
	}
}

// TestBadInput checks that each mistake is a clear error with its exit
// code and changes nothing.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		stdin  io.Reader
		code   int
		errOut string
	}{
		{"UnknownCommand", []string{"jobs", "frobnicate"}, nil, exitUsage, `unknown command "jobs frobnicate"`},
		{"UnknownFlag", []string{"jobs", "list", "--colour"}, nil, exitUsage, "flag provided but not defined: -colour"},
		{"UnknownState", []string{"jobs", "list", "--state", "failed"}, nil, exitUsage, `--state: unknown state "failed" (one of scheduled, retrying`},
		{"UnknownPriority", []string{"jobs", "retry", "--priority", "urgent", "--yes"}, nil, exitUsage, `unknown priority "urgent"`},
		{"BadMeta", []string{"jobs", "list", "--meta", "tenant"}, nil, exitUsage, `want key=value, got "tenant"`},
		{"BadTime", []string{"jobs", "list", "--run-after", "yesterday"}, nil, exitUsage, "want an RFC 3339 time"},
		{"TimeOutOfRange", []string{"jobs", "list", "--run-before", "1900-01-01T00:00:00Z"}, nil, exitUsage, "invalid job filter"},
		{"BadOrder", []string{"jobs", "list", "--order", "random"}, nil, exitUsage, "--order: want newest or oldest"},
		{"BadLimit", []string{"jobs", "list", "--limit", "0"}, nil, exitUsage, "--limit: 0 not in [1, 1000]"},
		{"MalformedCursor", []string{"jobs", "list", "--cursor", "abc"}, nil, exitUsage, `invalid list cursor: "abc" is not a cursor`},
		{"InvalidUTF8Kind", []string{"jobs", "list", "--kind", "a\xffb"}, nil, exitUsage, "invalid job filter"},
		{"BadJobID", []string{"jobs", "show", "42"}, nil, exitUsage, `"42" is not a job ID`},
		{"BadBulkID", []string{"jobs", "cancel", "42", "--yes"}, nil, exitUsage, `"42" is not a job ID`},
		{"BadBatch", []string{"jobs", "retry", "--state", "dead", "--batch", "0", "--yes"}, nil, exitUsage, "BatchSize(0)"},
		{"DeleteWithoutFilter", []string{"jobs", "delete", "--yes"}, nil, exitUsage, "no filter selects the jobs to delete"},
		{"DeleteAllWithoutYes", []string{"jobs", "delete", "--all"}, nil, exitUsage, "refusing to change jobs without --yes: standard input is not a terminal"},
		{"RetryWithoutYes", []string{"jobs", "retry", "--state", "dead"}, nil, exitUsage, "refusing to change jobs without --yes"},
		{"RetryDeclined", []string{"jobs", "retry", "--state", "dead"}, terminal{strings.NewReader("n\n")}, exitError, "not confirmed: nothing changed"},
		{"RetryNoAnswer", []string{"jobs", "retry", "--state", "dead"}, terminal{strings.NewReader("")}, exitError, "not confirmed"},
		{"UnknownKind", []string{"kinds", "pause", "emial.send"}, nil, exitNotFound, `kind "emial.send": no jobs, no running node handles it`},
		{"EmptyKind", []string{"kinds", "pause", "", "--force"}, nil, exitUsage, "invalid job kind"},
		{"KindArgs", []string{"kinds", "resume"}, nil, exitUsage, "want one kind"},
		{"BreakerOfKindWithout", []string{"kinds", "open", "report.build"}, nil, exitNotFound, "no circuit breaker"},
		{"PartitionBreakerOfKindWithout", []string{"kinds", "open-partition", "report.build", "acme"}, nil, exitNotFound, "no partition breaker"},
		{"PartitionBreakerNoKey", []string{"kinds", "close-partition", "email.send"}, nil, exitUsage, "want a kind and a partition key"},
		{"BreakerArgs", []string{"kinds", "close"}, nil, exitUsage, "want one kind"},
		{"UnknownSchedule", []string{"periodic", "pause", "weekly"}, nil, exitNotFound, "periodic schedule not found"},
		{"UnknownScheduleTrigger", []string{"periodic", "trigger", "weekly"}, nil, exitNotFound, "periodic schedule not found"},
		{"ListArgs", []string{"jobs", "list", "email.send"}, nil, exitUsage, `unexpected argument "email.send" (filters are flags)`},
		{"BadTimeout", []string{"--timeout", "soon", "stats"}, nil, exitUsage, "invalid value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			before := c.snapshot(t)
			kinds, err := c.st.KindStates(t.Context())
			require.NoError(t, err)
			out, errOut, code := c.ax(t, tc.stdin, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Contains(t, errOut, tc.errOut)
			require.Equal(t, before, c.snapshot(t), "a refused command changed jobs")
			after, err := c.st.KindStates(t.Context())
			require.NoError(t, err)
			require.Equal(t, kinds, after, "a refused command changed kinds")
		})
	}
}
