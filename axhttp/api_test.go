package axhttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// TestSubmitIsIdempotent: a repeated submission with the same unique key
// returns the same job, marked duplicate, and schedules nothing.
func TestSubmitIsIdempotent(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := `{"kind":"email","payload":{"to":"a@example.com"},"unique_key":"signup-42","metadata":{"tenant":"7"},"priority":"low","max_attempts":4,"run_at":"2031-01-02T03:04:05Z"}`
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", body)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
	var first SubmitResponse
	require.NoError(t, json.Unmarshal(b, &first))
	require.False(t, first.Duplicate)
	require.Equal(t, "/ax"+APIPrefix+"/jobs/"+first.ID.String(), res.Header.Get("Location"))
	require.Equal(t, store.PriorityLow, first.Job.Priority)
	require.Equal(t, 4, first.Job.MaxAttempts)
	require.Equal(t, "7", first.Job.Metadata["tenant"])
	require.True(t, first.Job.RunAt.Equal(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)))
	require.JSONEq(t, `{"to":"a@example.com"}`, string(first.Job.Payload))

	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs", body)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	var again SubmitResponse
	require.NoError(t, json.Unmarshal(b, &again))
	require.True(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID)
	n, err := f.s.Admin().Count(context.Background(), ax.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	// In a batch too, per job.
	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs/batch", `{"jobs":[{"kind":"email","unique_key":"signup-42"},{"kind":"email","unique_key":"signup-43"}]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	var batch BatchResponse
	require.NoError(t, json.Unmarshal(b, &batch))
	require.Len(t, batch.Results, 2)
	require.True(t, batch.Results[0].Duplicate)
	require.Equal(t, first.ID, batch.Results[0].ID)
	require.False(t, batch.Results[1].Duplicate)
}

// TestListFiltersAndCursors: the listing takes the CLI's filters as query
// parameters and pages with cursors, seeing every job once.
func TestListFiltersAndCursors(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	for i := range 7 {
		_, err := f.s.Schedule(ctx, "email", i, ax.Metadata(map[string]string{"tenant": "acme"}), ax.In(time.Hour))
		require.NoError(t, err)
	}
	_, err := f.s.Schedule(ctx, "sms", 1, ax.In(time.Hour))
	require.NoError(t, err)
	deadJob(t, f.st, "email", "mailbox full")

	list := func(q string) ax.JobList {
		res, b := f.call(&f.app, "GET", APIPrefix+"/jobs?"+q, "")
		require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
		var l ax.JobList
		require.NoError(t, json.Unmarshal(b, &l))
		return l
	}
	seen := map[string]bool{}
	q := url.Values{"kind": {"email"}, "state": {"scheduled"}, "meta": {"tenant=acme"}, "limit": {"3"}, "order": {"oldest"}}
	pages := 0
	for {
		l := list(q.Encode())
		pages++
		for _, j := range l.Jobs {
			require.Equal(t, "email", j.Kind)
			require.Equal(t, ax.StateScheduled, j.State)
			require.False(t, seen[j.ID.String()], "listed twice")
			seen[j.ID.String()] = true
		}
		if l.Cursor == "" {
			break
		}
		q.Set("cursor", l.Cursor)
	}
	require.Len(t, seen, 7)
	require.Equal(t, 3, pages)
	require.Len(t, list("error_contains=mailbox").Jobs, 1)
	require.Len(t, list("kind=email,sms&state=scheduled").Jobs, 8)
	require.Len(t, list("run_after=30m&state=scheduled").Jobs, 8)

	res, b := f.call(&f.app, "GET", APIPrefix+"/jobs/count?kind=email", "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"count":8}`, string(b))

	// A cursor made for the other order, a misspelt filter: 400.
	for _, bad := range []string{"order=newest&cursor=" + url.QueryEscape(list("limit=1&order=oldest").Cursor), "knid=email", "limit=5000", "run_after=yesterday"} {
		res, b := f.call(&f.app, "GET", APIPrefix+"/jobs?"+bad, "")
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", bad, b)
	}

	// Bulk retry by filter.
	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs/retry?state=dead&kind=email", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	require.JSONEq(t, `{"changed":1}`, string(b))
	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs/cancel?kind=sms", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	require.JSONEq(t, `{"changed":1}`, string(b))
}

// TestCallbackURLNeedsFollowUps: a callback_url is checked against the
// policy (400), and the store must keep follow-ups (501 until memstore
// implements store.FollowUpStore).
func TestCallbackURLNeedsFollowUps(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"invoice","callback_url":"file:///etc/passwd"}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s", b)
	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"invoice","callback_url":"http://127.0.0.1:9/hook"}`)
	if _, ok := f.st.(store.FollowUpStore); ok {
		require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
	} else {
		require.Equal(t, http.StatusNotImplemented, res.StatusCode, "%s", b)
		require.Contains(t, string(b), ProblemUnsupported)
	}
	// A server with no callback policy takes no callback URL.
	f2 := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.CallbackPolicy = nil }})
	res, b = f2.call(&f2.app, "POST", APIPrefix+"/jobs", `{"kind":"invoice","callback_url":"https://hooks.example.com/"}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s", b)
}

// TestNoncesSharedThroughTheStore: two API servers on one store refuse a
// request replayed from one to the other.
func TestNoncesSharedThroughTheStore(t *testing.T) {
	a := newFixture(t, fixtureOptions{})
	b := newFixture(t, fixtureOptions{store: a.st})
	_, shared := NoncesFor(a.st)
	require.True(t, shared, "memstore keeps nonces")
	req, err := http.NewRequest("GET", a.base+APIPrefix+"/stats", nil)
	require.NoError(t, err)
	require.NoError(t, a.app.Sign(req))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	// The same signed request, to the other server (same path below the
	// mount point, so the signature holds).
	replay, err := http.NewRequest("GET", b.base+APIPrefix+"/stats", nil)
	require.NoError(t, err)
	replay.Header = req.Header.Clone()
	res, err = http.DefaultClient.Do(replay)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	_, sharedBare := NoncesFor(bareStore{a.st})
	require.False(t, sharedBare)
}

// TestOwnAuthInFront: without Auth, the user's middleware names the
// caller with WithIdentity; a read-only identity can read but not
// change, in the API and the dashboard, and ReadOnly makes everyone
// read-only.
func TestOwnAuthInFront(t *testing.T) {
	front := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user := r.Header.Get("X-User") // say, from the company's SSO proxy
			if user == "" {
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			id := Identity{KeyID: user, ReadOnly: user == "viewer"}
			next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
		})
	}
	f := newFixture(t, fixtureOptions{noAuth: true, front: front})
	dead := deadJob(t, f.st, "email", "boom")
	retry := APIPrefix + "/jobs/" + dead.String() + "/retry"
	res, b := f.call(nil, "POST", retry, "", "X-User", "viewer")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "%s", b)
	res, _ = f.call(nil, "GET", APIPrefix+"/jobs/"+dead.String(), "", "X-User", "viewer")
	require.Equal(t, http.StatusOK, res.StatusCode)

	page := func(user, path string) string {
		req, _ := http.NewRequest("GET", f.base+path, nil)
		req.Header.Set("X-User", user)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return string(b)
	}
	require.NotContains(t, page("viewer", "/jobs/"+dead.String()), `id="retry"`)
	require.Contains(t, page("alice", "/jobs/"+dead.String()), `id="retry"`)
	require.NotContains(t, page("alice", "/jobs/"+dead.String()), "Log out", "no login without Auth")

	res, b = f.call(nil, "POST", retry, "", "X-User", "alice")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)

	ro := newFixture(t, fixtureOptions{cfg: func(c *Config) { c.ReadOnly = true }})
	d2 := deadJob(t, ro.st, "email", "boom")
	res, _ = ro.call(&ro.app, "POST", APIPrefix+"/jobs/"+d2.String()+"/retry", "")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}

// TestActivity: the ring counts per minute and forgets minutes older
// than an hour.
func TestActivity(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)
	a := NewActivity(func() time.Time { return now })
	ev := func(k ax.EventKind, at time.Time, lag time.Duration) ax.Event {
		return ax.Event{Kind: k, JobKind: "email", At: at, StartLag: lag}
	}
	a.Observe(ev(ax.EventStarted, now, 20*time.Millisecond))
	a.Observe(ev(ax.EventStarted, now, 40*time.Millisecond))
	a.Observe(ev(ax.EventSucceeded, now, 0))
	a.Observe(ev(ax.EventFailed, now, 0))
	a.Observe(ev(ax.EventDead, now, 0)) // follows the failure: not counted again
	a.Observe(ev(ax.EventSucceeded, now.Add(-10*time.Minute), 0))
	a.Observe(ev(ax.EventSucceeded, now.Add(-61*time.Minute), 0)) // too old: its slot is reused
	ms := a.Minutes("email")
	require.Len(t, ms, ActivityMinutes)
	last := ms[len(ms)-1]
	require.Equal(t, now.Truncate(time.Minute), last.Start.UTC())
	require.Equal(t, 2, last.Started)
	require.Equal(t, 1, last.Succeeded)
	require.Equal(t, 1, last.Failed)
	require.Equal(t, 40*time.Millisecond, last.LagMax)
	require.Equal(t, 30*time.Millisecond, last.LagAvg)
	require.Equal(t, 1, ms[len(ms)-11].Succeeded)
	total := 0
	for _, m := range ms {
		total += m.Succeeded
	}
	require.Equal(t, 2, total)
	require.Equal(t, []string{"email"}, a.Kinds())
	require.Empty(t, a.Minutes("sms")[59].Started)
}

// TestMethodAndRouteProblems: a route asked with another method answers
// 405 with Allow; an unknown route 404; both as problem documents.
func TestMethodAndRouteProblems(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	res, b := f.call(&f.app, "DELETE", APIPrefix+"/jobs", "")
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s", b)
	require.Equal(t, "GET, HEAD, POST", res.Header.Get("Allow"))
	require.Contains(t, string(b), ProblemMethod)
	res, b = f.call(&f.app, "PUT", APIPrefix+"/kinds/email/pause", "")
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s", b)
	require.Equal(t, "POST", res.Header.Get("Allow"))
	res, b = f.call(&f.app, "GET", APIPrefix+"/nope", "")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Contains(t, string(b), ProblemNotFound)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
}

// TestSubmitBackpressure: a submission to a kind whose queue is full
// (ax.MaxPending) is refused with 503 backpressure and Retry-After, and
// stores nothing.
func TestSubmitBackpressure(t *testing.T) {
	f := newFixture(t, fixtureOptions{start: true, setup: func(s *ax.Scheduler) {
		require.NoError(t, s.Handle("email", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }), ax.MaxPending(1)))
	}})
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"email","delay":"1h"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
	res, b = f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"email","delay":"1h"}`)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", b)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	var p Problem
	require.NoError(t, json.Unmarshal(b, &p))
	require.Equal(t, ProblemBackpressure, p.Type)
	require.Contains(t, p.Detail, "1 pending job(s) of kind \"email\", limit 1")
	n, err := f.s.Admin().Count(context.Background(), ax.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
