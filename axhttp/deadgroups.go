package axhttp

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Dead letters grouped by error: "412 × smtp: 550 mailbox full", with a
// retry and a discard per group. A group is a kind and the first line of
// its jobs' last error (cut at deadErrorBytes). Groups are computed from
// the newest deadScan dead jobs (of the kind filtered, if any), so a page
// costs one bounded listing however many jobs are dead; the page says
// when there are more.
//
// A group's action acts on the jobs the page counted in it, no others:
// its form carries what the page read (deadView: the latest death among
// the jobs scanned and, when the scan stopped at deadScan, the oldest job
// scanned), and the action lists the group's kind again within those
// bounds and acts, by ID, on the jobs still dead there whose error puts
// them in the group. A job that died since the page was drawn (later than
// the latest death it saw), one older than the scan reached, and one
// retried, discarded or gone dead again since, are left alone; so the
// count acted on is at most the count the page showed, and the message
// after says how many. (A death whose transaction began before the page's
// read and committed after it can carry an earlier time and be counted:
// a store stamps a finish with its transaction's time.)

const (
	// deadScan is how many dead jobs the groups are computed from, and
	// the most one group action changes.
	deadScan = store.MaxListLimit
	// deadErrorBytes bounds the error line that names a group.
	deadErrorBytes = 200
	// deadGroupsShown bounds the groups listed per section.
	deadGroupsShown = 50
)

// deadGroup is the dead jobs of one kind that died with one error.
type deadGroup struct {
	Kind   string
	Error  string // the first line of the last error, cut
	Key    string // names the group in a form (groupKey)
	Count  int
	Newest time.Time // when the latest of them died
	Sample uuid.UUID // that job
	View   deadView  // what the page read, for the group's forms
	ids    []uuid.UUID
}

// deadView is what a dead-letter page's groups were computed from, so
// that a group's action reads the same jobs.
type deadView struct {
	// Upto is the latest death (FinishedAt) among the jobs scanned.
	Upto time.Time
	// From is the oldest job scanned when the scan stopped at deadScan
	// (older dead jobs were not counted); zero when it read them all.
	From uuid.UUID
}

// UptoText is Upto as a form value.
func (v deadView) UptoText() string { return v.Upto.UTC().Format(time.RFC3339Nano) }

// FromText is From as a form value ("" when zero).
func (v deadView) FromText() string {
	if v.From == uuid.Nil {
		return ""
	}
	return v.From.String()
}

// parseDeadView reads the view a group's form carries.
func parseDeadView(upto, from string) (deadView, error) {
	var v deadView
	t, err := time.Parse(time.RFC3339Nano, upto)
	if err != nil {
		return v, badRequest("upto: want the RFC 3339 time the page was drawn from, got %q", upto)
	}
	v.Upto = t
	if from != "" {
		if v.From, err = uuid.Parse(from); err != nil {
			return v, badRequest("from: want a job ID, got %q", from)
		}
	}
	return v, nil
}

// errorLine is what names a job's group: the first line of its last
// error, trimmed and cut at deadErrorBytes.
func errorLine(rec *store.JobRecord) string {
	if len(rec.Errors) == 0 {
		return "(no error recorded)"
	}
	line, _, _ := strings.Cut(rec.Errors[len(rec.Errors)-1].Error, "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "(empty error)"
	}
	return cutUTF8([]byte(line), deadErrorBytes)
}

// groupKey names the group of kind and error line in a form: a hash, so
// a form never carries a text the server would have to match.
func groupKey(kind, line string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + line))
	return hex.EncodeToString(sum[:8])
}

// groupDead groups recs (dead jobs, newest first) by kind and error
// line, largest group first.
func groupDead(recs []*store.JobRecord) []*deadGroup {
	byKey := map[string]*deadGroup{}
	var out []*deadGroup
	for _, rec := range recs {
		line := errorLine(rec)
		key := groupKey(rec.Kind, line)
		g := byKey[key]
		if g == nil {
			g = &deadGroup{Kind: rec.Kind, Error: line, Key: key}
			byKey[key] = g
			out = append(out, g)
		}
		g.Count++
		g.ids = append(g.ids, rec.ID)
		if rec.FinishedAt.After(g.Newest) || g.Sample == uuid.Nil {
			g.Newest, g.Sample = rec.FinishedAt, rec.ID
		}
	}
	slices.SortStableFunc(out, func(a, b *deadGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Error, b.Error))
	})
	return out
}

// deadGroups lists the newest deadScan dead jobs (of kind, when set) and
// groups them as r's caller may see them (forCaller: a read-only caller's
// callback errors have their addresses hidden before they are cut to a
// line); scanned is how many were listed.
func (h *Handler) deadGroups(r *http.Request, kind string) (groups []*deadGroup, scanned int, err error) {
	f := ax.JobFilter{States: []ax.State{ax.StateDead}}
	if kind != "" {
		f.Kinds = []string{kind}
	}
	list, err := h.admin.List(r.Context(), ax.ListOptions{Filter: f, Limit: deadScan, PreviewBytes: ListPreviewBytes})
	if err != nil {
		return nil, 0, err
	}
	var view deadView
	for _, rec := range list.Jobs {
		if rec.FinishedAt.After(view.Upto) {
			view.Upto = rec.FinishedAt
		}
	}
	if list.Cursor != "" {
		// More dead jobs than the scan read: the action must not reach
		// past the oldest it read.
		view.From = list.Jobs[len(list.Jobs)-1].ID
	}
	groups = groupDead(h.allForCaller(r, list.Jobs))
	for _, g := range groups {
		g.View = view
	}
	return groups, len(list.Jobs), nil
}

// groupAsShown lists the dead jobs of kind that a page drawn with view
// counted and still are as it counted them (died no later than
// view.Upto, no older than view.From), and returns the group named key
// among them, or nil.
func (h *Handler) groupAsShown(r *http.Request, kind, key string, view deadView) (*deadGroup, error) {
	f := ax.JobFilter{States: []ax.State{ax.StateDead}, Kinds: []string{kind}, FinishedBefore: view.Upto.Add(time.Microsecond)}
	list, err := h.admin.List(r.Context(), ax.ListOptions{Filter: f, Limit: deadScan, PreviewBytes: ListPreviewBytes})
	if err != nil {
		return nil, err
	}
	jobs := list.Jobs
	if view.From != uuid.Nil {
		// Newest first: keep those at or after From.
		i := slices.IndexFunc(jobs, func(rec *store.JobRecord) bool { return bytes.Compare(rec.ID[:], view.From[:]) < 0 })
		if i >= 0 {
			jobs = jobs[:i]
		}
	}
	for _, g := range groupDead(h.allForCaller(r, jobs)) {
		if g.Key == key {
			return g, nil
		}
	}
	return nil, nil
}

// postDeadGroup retries or discards (deletes) the dead jobs of one
// group as the page showed it: form fields kind, group (its key), upto
// and from (its deadView).
func (h *Handler) postDeadGroup(discard bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		kind, key := r.PostForm.Get("kind"), r.PostForm.Get("group")
		if kind == "" {
			return "", "", badRequest("no kind given")
		}
		if b, err := hex.DecodeString(key); err != nil || len(b) != 8 {
			return "", "", badRequest("%q does not name a group", key)
		}
		view, err := parseDeadView(r.PostForm.Get("upto"), r.PostForm.Get("from"))
		if err != nil {
			return "", "", err
		}
		g, err := h.groupAsShown(r, kind, key, view)
		if err != nil {
			return "", "", err
		}
		if g == nil {
			return "", "", problem(http.StatusNotFound, ProblemNotFound, "no dead job of this kind has this error any more (retried or discarded already?)")
		}
		f := ax.JobFilter{IDs: g.ids, Kinds: []string{kind}, States: []ax.State{ax.StateDead}}
		verb, do := "Retried", h.admin.RetryJobs
		if discard {
			verb, do = "Discarded", h.admin.DeleteJobs
		}
		n, err := do(r.Context(), f)
		if err != nil {
			return "", "", err
		}
		// The flash cookie carries at most 300 bytes.
		return cutUTF8(fmt.Appendf(nil, "%s %d dead job(s) of %s: %s", verb, n, kind, g.Error), 290), "/dead", nil
	}
}
