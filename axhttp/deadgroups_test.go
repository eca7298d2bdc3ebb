package axhttp

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// TestDeadGroups: the dead letters page groups dead jobs by kind and
// error line, callback deliveries apart; a group's retry and discard
// act on exactly that group's jobs, and a second press finds the group
// gone (404).
func TestDeadGroups(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var full, later []uuid.UUID
	for range 3 {
		full = append(full, deadJob(t, f.st, "smtp", "550 mailbox full"))
	}
	for range 2 {
		later = append(later, deadJob(t, f.st, "smtp", "421 try again later\n\tat smtp.go:12"))
	}
	otherKind := deadJob(t, f.st, "email", "550 mailbox full")
	_, delivery := deadCallback(t, f.st)
	admin := f.browser()
	admin.login("app", testSecret)

	page := admin.page("/dead")
	groups := sectionOf(t, page, "dead-groups")
	calls := sectionOf(t, page, "dead-callbacks")
	require.Regexp(t, `(?s)<strong>3 ×</strong>.*smtp.*550 mailbox full`, groups)
	require.Regexp(t, `(?s)<strong>2 ×</strong>.*smtp.*421 try again later</td>`, groups, "a group is named by the error's first line")
	require.Regexp(t, `(?s)<strong>1 ×</strong>.*email.*550 mailbox full`, groups)
	require.NotContains(t, groups, CallbackKind)
	require.Contains(t, calls, CallbackKind)
	require.Contains(t, calls, "deliver callback")

	state := func(id uuid.UUID) string {
		rec, err := f.s.Admin().Get(context.Background(), id)
		if errors.Is(err, ax.ErrNotFound) {
			return "deleted"
		}
		require.NoError(t, err)
		return string(rec.State)
	}
	states := func(ids ...uuid.UUID) []string {
		var out []string
		for _, id := range ids {
			out = append(out, state(id))
		}
		return out
	}
	token := admin.csrf("/dead")
	res, body := admin.post("/dead/group/retry", groupForm(t, page, token, "smtp", "550 mailbox full"))
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.NotContains(t, states(full...), "dead")
	require.Equal(t, []string{"dead", "dead"}, states(later...))
	require.Equal(t, "dead", state(otherKind))
	require.Equal(t, "dead", state(delivery))
	require.Contains(t, admin.page("/dead"), "Retried 3 dead job(s) of smtp: 550 mailbox full")

	res, body = admin.post("/dead/group/discard", groupForm(t, page, token, "smtp", "421 try again later"))
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, []string{"deleted", "deleted"}, states(later...))
	require.NotContains(t, states(full...), "deleted")
	require.Equal(t, "dead", state(otherKind))

	res, body = admin.post("/dead/group/discard", groupForm(t, page, token, "smtp", "421 try again later"))
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)

	reader := f.browser()
	reader.login("dash", readerSecret)
	page = reader.page("/dead")
	require.NotContains(t, page, "group-retry")
	for _, addr := range []string{"10.96.0.10", "fd00:ab"} {
		require.NotContains(t, page, addr, "a read-only key sees an address in a callback group")
	}
}

// TestGroupDeadBounded: with a store that does not group dead jobs,
// however many dead jobs there are, the groups are computed from the
// newest deadScan, and the page says so.
func TestGroupDeadBounded(t *testing.T) {
	f := newFixture(t, fixtureOptions{store: noGrouper{memstore.New()}})
	for range deadScan + 5 {
		deadJob(t, f.st, "smtp", "550 mailbox full")
	}
	admin := f.browser()
	admin.login("app", testSecret)
	page := admin.page("/dead")
	require.Contains(t, page, "The groups below count the newest 1000")
	require.Contains(t, sectionOf(t, page, "dead-groups"), "<strong>1000 ×</strong>")
}

var sectionRE = regexp.MustCompile(`(?s)<table class="groups" id="([a-z-]+)">(.*?)</table>|<p class="hint" id="([a-z-]+)-none">`)

// sectionOf returns the HTML of the groups table with that id ("" for
// an empty section).
func sectionOf(t *testing.T, page, id string) string {
	t.Helper()
	for _, m := range sectionRE.FindAllStringSubmatch(page, -1) {
		if m[1] == id {
			return m[2]
		}
		if m[3] == id {
			return ""
		}
	}
	t.Fatalf("no section %s", id)
	return ""
}

// groupForm returns the form of the group of kind and error line that
// page shows, with the CSRF token.
func groupForm(t *testing.T, page, token, kind, line string) url.Values {
	t.Helper()
	key := groupKey(kind, line)
	re := regexp.MustCompile(`name="group" value="` + key + `">\s*<input type="hidden" name="upto" value="([^"]*)">\s*<input type="hidden" name="after" value="([^"]*)">\s*<input type="hidden" name="from" value="([^"]*)">\s*<input type="hidden" name="count" value="([^"]*)">`)
	m := re.FindStringSubmatch(page)
	require.NotNil(t, m, "no form of group %s: %s", kind, line)
	return url.Values{"csrf": {token}, "kind": {kind}, "group": {key}, "upto": {m[1]}, "after": {m[2]}, "from": {m[3]}, "count": {m[4]}}
}

// noGrouper is a memstore that does not group dead jobs itself
// (store.DeadGrouper), as a user's store may not: the page then groups
// the newest deadScan dead jobs.
type noGrouper struct{ *memstore.Store }

// DeadGroups hides memstore's: noGrouper is no store.DeadGrouper.
func (noGrouper) DeadGroups() {}

// TestDeadGroupActsOnWhatItShowed: a group's action touches the jobs the
// page counted in it and no others: not those that died since the page
// was drawn, nor those older than its scan reached (the page counts the
// newest deadScan dead jobs of every kind; the kind has more).
func TestDeadGroupActsOnWhatItShowed(t *testing.T) {
	t.Run("DiedSince", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{})
		for range 3 {
			deadJob(t, f.st, "smtp", "550 mailbox full")
		}
		admin := f.browser()
		admin.login("app", testSecret)
		page := admin.page("/dead")
		require.Contains(t, page, `data-confirm="Delete these 3 dead job(s) of smtp?`)
		var since []uuid.UUID
		for range 2 {
			since = append(since, deadJob(t, f.st, "smtp", "550 mailbox full"))
		}
		res, body := admin.post("/dead/group/discard", groupForm(t, page, admin.csrf("/dead"), "smtp", "550 mailbox full"))
		require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
		require.Contains(t, admin.page("/dead"), "Discarded 3 dead job(s) of smtp")
		for _, id := range since {
			rec, err := f.s.Admin().Get(context.Background(), id)
			require.NoError(t, err, "a job that died after the page was drawn was discarded")
			require.Equal(t, ax.StateDead, rec.State)
		}
	})
	t.Run("OlderThanTheScan", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{store: noGrouper{memstore.New()}})
		for range 25 {
			deadJob(t, f.st, "smtp", "550 mailbox full")
		}
		for range deadScan - 5 {
			deadJob(t, f.st, "noisy", "boom")
		}
		admin := f.browser()
		admin.login("app", testSecret)
		page := admin.page("/dead")
		require.Contains(t, page, `data-confirm="Delete these 5 dead job(s) of smtp?`)
		res, body := admin.post("/dead/group/discard", groupForm(t, page, admin.csrf("/dead"), "smtp", "550 mailbox full"))
		require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
		require.Contains(t, admin.page("/dead"), "Discarded 5 dead job(s) of smtp")
		n, err := f.s.Admin().Count(context.Background(), ax.JobFilter{Kinds: []string{"smtp"}, States: []ax.State{ax.StateDead}})
		require.NoError(t, err)
		require.EqualValues(t, 20, n)
	})
}

// TestDeadGroupsCountEveryDeadJob: with a store that groups dead jobs, the
// groups count every dead job, so a noisy kind with more than deadScan
// dead jobs hides neither another kind's group nor a dead callback
// delivery; the window counts only recent deaths; and a group's discard
// acts on what the group counted, however old. (Issue 41: the groups
// were computed from the newest 1,000 dead jobs.)
func TestDeadGroupsCountEveryDeadJob(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	f := newFixture(t, fixtureOptions{store: memstore.New(memstore.WithClock(clock)), cfg: func(c *Config) { c.Clock = clock }})
	for range 3 {
		deadJob(t, f.st, "smtp", "550 mailbox full")
	}
	_, delivery := deadCallback(t, f.st)
	for range deadScan + 5 {
		deadJob(t, f.st, "noisy", "boom")
	}
	admin := f.browser()
	admin.login("app", testSecret)
	page := admin.page("/dead")
	groups := sectionOf(t, page, "dead-groups")
	require.Contains(t, groups, "<strong>1005 ×</strong>")
	require.Regexp(t, `(?s)<strong>3 ×</strong>.*smtp.*550 mailbox full`, groups)
	require.Contains(t, sectionOf(t, page, "dead-callbacks"), CallbackKind)
	require.Contains(t, page, "The groups count every dead job")

	for _, bad := range []string{"bogus", "-1h", "9000h"} {
		res, _ := admin.get("/dead?window=" + bad)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "window %s", bad)
	}

	// Only the jobs that died after the window's start count.
	windowed := admin.page("/dead?window=1h")
	require.Contains(t, sectionOf(t, windowed, "dead-groups"), "<strong>1005 ×</strong>")
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	admin.login("app", testSecret) // the session expired meanwhile
	late := deadJob(t, f.st, "smtp", "550 mailbox full")
	windowed = admin.page("/dead?window=1h")
	recent := sectionOf(t, windowed, "dead-groups")
	require.Regexp(t, `(?s)<strong>1 ×</strong>.*smtp.*550 mailbox full`, recent)
	require.NotContains(t, recent, "noisy")

	res, body := admin.post("/dead/group/discard", groupForm(t, page, admin.csrf("/dead"), "smtp", "550 mailbox full"))
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Contains(t, admin.page("/dead"), "Discarded 3 dead job(s) of smtp")
	rec, err := f.s.Admin().Get(context.Background(), late)
	require.NoError(t, err, "a job that died after the page was drawn was discarded")
	require.Equal(t, ax.StateDead, rec.State)
	rec, err = f.s.Admin().Get(context.Background(), delivery)
	require.NoError(t, err)
	require.Equal(t, ax.StateDead, rec.State)
}
