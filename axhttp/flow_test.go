package axhttp

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// breakerKind is the kind with flow control in the Kinds page tests.
const breakerKind = "smtp"

// withBreaker registers breakerKind with a breaker, a concurrency cap
// and a rate limit (its handler never runs: no job of it is scheduled).
func withBreaker(t *testing.T) func(s *ax.Scheduler) {
	return func(s *ax.Scheduler) {
		require.NoError(t, s.Handle(breakerKind, ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
			ax.CircuitBreaker(ax.BreakerConfig{Failures: 3, CoolDown: time.Hour}), ax.GlobalConcurrency(5), ax.RateLimit(100, time.Second)))
	}
}

// waitForFlow waits until the Admin lists breakerKind's flow settings
// (stored by the Scheduler at Start).
func waitForFlow(t *testing.T, f *fixture) {
	t.Helper()
	waitFor(t, "the flow settings stored", func() bool {
		kinds, err := f.s.Admin().Kinds(context.Background())
		if err != nil {
			return false
		}
		for _, k := range kinds {
			if k.Kind == breakerKind && k.Flow != nil {
				return true
			}
		}
		return false
	})
}

// TestKindsFlow: the Kinds page shows a kind's breaker, limits and
// running count in the words ax kinds list prints, and its buttons open
// and close the breaker in the store; a kind without a breaker has no
// button, and opening its breaker is a 404.
func TestKindsFlow(t *testing.T) {
	f := newFixture(t, fixtureOptions{start: true, setup: withBreaker(t)})
	deadJob(t, f.st, "email", "smtp down")
	waitForFlow(t, f)
	admin := f.browser()
	admin.login("app", testSecret)

	page := admin.page("/kinds")
	require.Contains(t, page, `<td class="limits">5 running, 100/1s</td>`)
	require.Regexp(t, `<td class="now">0 of 5 running, \d+ starts available now</td>`, page)
	require.Contains(t, page, `<span class="badge breaker closed">closed</span>`)
	require.Contains(t, page, `action="/ax/kinds/smtp/breaker/open"`)
	require.NotContains(t, page, `action="/ax/kinds/email/breaker/`, "a kind without a breaker has a breaker button")

	breakerOf := func() string {
		kinds, err := f.s.Admin().Kinds(context.Background())
		require.NoError(t, err)
		for _, k := range kinds {
			if k.Kind == breakerKind {
				return BreakerSummary(k.Flow)
			}
		}
		return ""
	}
	token := admin.csrf("/kinds")
	res, body := admin.post("/kinds/smtp/breaker/open", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.True(t, strings.HasPrefix(breakerOf(), "open until "), breakerOf())
	page = admin.page("/kinds")
	require.Contains(t, page, `<span class="badge breaker open">`+breakerOf()+`</span>`)
	require.Contains(t, page, "Opened the breaker of kind smtp")
	require.Contains(t, page, `action="/ax/kinds/smtp/breaker/close"`)

	res, body = admin.post("/kinds/smtp/breaker/close", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "closed", breakerOf())

	res, body = admin.post("/kinds/email/breaker/open", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)

	reader := f.browser()
	reader.login("dash", readerSecret)
	page = reader.page("/kinds")
	require.Contains(t, page, `<span class="badge breaker closed">closed</span>`)
	require.NotContains(t, page, "breaker-button")
}

// TestKindsPartitionBreakers: a kind with a breaker per partition shows
// how many partitions are open and lists them; the Open partition form
// opens one partition's breaker in the store, its Close button closes it;
// a kind without partition breakers is a 404; a read-only session has no
// buttons.
func TestKindsPartitionBreakers(t *testing.T) {
	const kind = "hook"
	f := newFixture(t, fixtureOptions{start: true, setup: func(s *ax.Scheduler) {
		require.NoError(t, s.Handle(kind, ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil }),
			ax.PartitionBreaker(ax.PartitionByMetadata("subscriber"), ax.BreakerConfig{Failures: 3, CoolDown: time.Hour})))
	}})
	deadJob(t, f.st, "email", "smtp down")
	waitFor(t, "the flow settings stored", func() bool {
		_, err := f.s.Admin().PartitionBreakers(context.Background(), kind)
		return err == nil
	})
	admin := f.browser()
	admin.login("app", testSecret)
	page := admin.page("/kinds")
	require.Contains(t, page, `<span class="badge breaker closed">per subscriber: 0 open</span>`)
	require.Contains(t, page, `action="/ax/kinds/hook/partitions/open"`)

	token := admin.csrf("/kinds")
	res, body := admin.post("/kinds/hook/partitions/open", url.Values{"csrf": {token}, "key": {"acme"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	parts, err := f.s.Admin().PartitionBreakers(context.Background(), kind)
	require.NoError(t, err)
	require.Len(t, parts, 1)
	require.Equal(t, "acme", parts[0].PartitionKey)
	require.Equal(t, ax.BreakerOpen, parts[0].Breaker.State)
	page = admin.page("/kinds")
	require.Contains(t, page, `Opened the breaker of kind hook partition &#34;acme&#34;`)
	require.Contains(t, page, `<span class="badge breaker open">per subscriber: 1 open</span>`)
	require.Contains(t, page, `<code>&#34;acme&#34;</code> `+PartitionBreakerSummary(&parts[0]))
	require.Contains(t, page, `action="/ax/kinds/hook/partitions/close"`)

	res, body = admin.post("/kinds/hook/partitions/close", url.Values{"csrf": {token}, "key": {"acme"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	parts, err = f.s.Admin().PartitionBreakers(context.Background(), kind)
	require.NoError(t, err)
	require.Empty(t, parts)

	res, body = admin.post("/kinds/email/partitions/open", url.Values{"csrf": {token}, "key": {"acme"}})
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)

	reader := f.browser()
	reader.login("dash", readerSecret)
	page = reader.page("/kinds")
	require.NotContains(t, page, "partition-open")
}

func TestFlowSummaries(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	flow := func(edit func(f *ax.FlowState)) *ax.FlowState {
		f := &ax.FlowState{Now: now}
		f.Config.Kind = "k"
		edit(f)
		return f
	}
	cases := []struct {
		name                   string
		f                      *ax.FlowState
		breaker, limits, nowIs string
	}{
		{"none", nil, "-", "", ""},
		{"concurrency", flow(func(f *ax.FlowState) { f.Config.Concurrency = 5; f.Running = 3 }), "-", "5 running", "3 of 5 running"},
		{"rate reached", flow(func(f *ax.FlowState) {
			f.Config.Rate.Limit, f.Config.Rate.Period, f.RateNextAt = 10, time.Minute, now.Add(time.Second)
		}), "-", "10/1m0s", "0 running, rate limit reached: next start at 2026-12-01T03:00:01Z"},
		{"breaker open", flow(func(f *ax.FlowState) {
			f.Config.Breaker.Failures, f.Breaker.State, f.Breaker.ProbeAt = 3, ax.BreakerOpen, now.Add(time.Minute)
		}), "open until 2026-12-01T03:01:00Z", "", "0 running"},
		{"half-open", flow(func(f *ax.FlowState) { f.Config.Breaker.Failures, f.Breaker.State = 3, ax.BreakerHalfOpen }), "half-open", "", "0 running"},
		{"partition breakers", flow(func(f *ax.FlowState) {
			f.Config.Partition.Metadata, f.Config.PartitionBreaker.Failures, f.PartitionBreakersOpen = "tenant", 3, 2
		}), "per tenant: 2 open", "", "0 running"},
		{"both breakers", flow(func(f *ax.FlowState) {
			f.Config.Breaker.Failures, f.Config.Partition.PayloadField, f.Config.PartitionBreaker.Failures = 3, "customer", 3
			f.Config.PartitionConcurrency = 2
		}), "closed, per payload.customer: 0 open", "per payload.customer: 2 running", "0 running"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.breaker, BreakerSummary(c.f))
			require.Equal(t, c.limits, LimitsSummary(c.f))
			require.Equal(t, c.nowIs, NowSummary(c.f))
		})
	}
}
