package axhttp

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Dead letters grouped by error: "412 × smtp: 550 mailbox full", with a
// retry and a discard per group. A group is a kind and the first line of
// its jobs' last error (store.DeadErrorLine). A store that groups dead
// jobs itself (store.DeadGrouper: memstore, pgstore, sqlitestore) counts
// every dead job, optionally only those that died within a window (the
// window parameter: "died in the last hour"), application kinds and
// callback deliveries apart, so one noisy kind hides no other group. With
// another store, the groups are computed from the newest deadScan dead
// jobs, and the page says so.
//
// A group's action acts on the jobs the page counted in it, no others:
// its form carries what the page read (deadView: the latest death counted
// in the group, the window's start, how many it showed and, for a scan,
// the oldest job scanned), and the action lists the group's kind again
// within those bounds and acts, by ID, on at most that many jobs still
// dead there whose error puts them in the group. A job that died since
// the page was drawn (later than the latest death it saw), one older than
// the window or the scan, and one retried, discarded or gone dead again
// since, are left alone; the message after says how many were acted on.
// (A death whose transaction began before the page's read and committed
// after it can carry an earlier time and be counted: a store stamps a
// finish with its transaction's time.)

const (
	// deadScan is how many dead jobs the groups are computed from when
	// the store does not group them itself, and the page size of a
	// group action's listing.
	deadScan = store.MaxListLimit
	// deadGroupsShown bounds the groups listed per section.
	deadGroupsShown = 50
	// deadActMax bounds the jobs one press of a group's button acts on;
	// a larger group takes more presses (the message says so).
	deadActMax = 10 * deadScan
	// maxDeadWindow bounds the window parameter.
	maxDeadWindow = 366 * 24 * time.Hour
)

// deadGroup is the dead jobs of one kind that died with one error.
type deadGroup struct {
	Kind   string
	Line   string // store.DeadErrorLine: names the group
	Error  string // Line as shown
	Key    string // names the group in a form (groupKey)
	Count  int64
	Newest time.Time // when the latest of them died
	Sample uuid.UUID // one of them
	View   deadView  // what the page read, for the group's forms
}

// deadView is what a dead-letter page counted in a group, so that the
// group's action reads the same jobs.
type deadView struct {
	// Upto is the latest death (FinishedAt) counted.
	Upto time.Time
	// After, when not zero, is the window's start: no job that died
	// before it was counted.
	After time.Time
	// From, when not zero, is the oldest job a scan read (older dead jobs
	// were not counted).
	From uuid.UUID
	// Count is how many jobs the page showed in the group.
	Count int64
}

// UptoText is Upto as a form value.
func (v deadView) UptoText() string { return v.Upto.UTC().Format(time.RFC3339Nano) }

// AfterText is After as a form value ("" when zero).
func (v deadView) AfterText() string {
	if v.After.IsZero() {
		return ""
	}
	return v.After.UTC().Format(time.RFC3339Nano)
}

// FromText is From as a form value ("" when zero).
func (v deadView) FromText() string {
	if v.From == uuid.Nil {
		return ""
	}
	return v.From.String()
}

// parseDeadView reads the view a group's form carries.
func parseDeadView(form url.Values) (deadView, error) {
	var v deadView
	t, err := time.Parse(time.RFC3339Nano, form.Get("upto"))
	if err != nil {
		return v, badRequest("upto: want the RFC 3339 time the page was drawn from, got %q", form.Get("upto"))
	}
	v.Upto = t
	if a := form.Get("after"); a != "" {
		if v.After, err = time.Parse(time.RFC3339Nano, a); err != nil {
			return v, badRequest("after: want an RFC 3339 time, got %q", a)
		}
	}
	if from := form.Get("from"); from != "" {
		if v.From, err = uuid.Parse(from); err != nil {
			return v, badRequest("from: want a job ID, got %q", from)
		}
	}
	n, err := strconv.ParseInt(form.Get("count"), 10, 64)
	if err != nil || n < 1 {
		return v, badRequest("count: want how many jobs the page showed, got %q", form.Get("count"))
	}
	v.Count = n
	return v, nil
}

// shownLine is how a page shows a group's error line.
func shownLine(line string) string {
	if line == "" {
		return "(no error recorded, or an empty first line)"
	}
	return line
}

// groupKey names the group of kind and error line in a form: a hash, so
// a form never carries a text the server would have to match.
func groupKey(kind, line string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + line))
	return hex.EncodeToString(sum[:8])
}

// newDeadGroup returns the group of kind and line.
func newDeadGroup(kind, line string) *deadGroup {
	return &deadGroup{Kind: kind, Line: line, Error: shownLine(line), Key: groupKey(kind, line)}
}

// groupDead groups recs (dead jobs) by kind and error line, largest
// group first.
func groupDead(recs []*store.JobRecord) []*deadGroup {
	byKey := map[string]*deadGroup{}
	var out []*deadGroup
	for _, rec := range recs {
		line := store.DeadErrorLine(rec)
		key := groupKey(rec.Kind, line)
		g := byKey[key]
		if g == nil {
			g = newDeadGroup(rec.Kind, line)
			byKey[key] = g
			out = append(out, g)
		}
		g.Count++
		if rec.FinishedAt.After(g.Newest) || g.Sample == uuid.Nil {
			g.Newest, g.Sample = rec.FinishedAt, rec.ID
		}
	}
	slices.SortStableFunc(out, func(a, b *deadGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Line, b.Line))
	})
	return out
}

// deadSections are a dead-letter page's groups.
type deadSections struct {
	Groups, Callbacks     []*deadGroup
	MoreApp, MoreCalls    int
	Scanned               int  // dead jobs scanned (scan only)
	All                   bool // the store counted every dead job
	Window                time.Duration
	AppJobs, CallbackJobs int64
}

// deadSectionsOf computes the groups of the dead jobs of kind (every
// kind when empty) that died within window (every one when zero).
func (h *Handler) deadSectionsOf(r *http.Request, kind string, window time.Duration) (*deadSections, error) {
	var after time.Time
	if window > 0 {
		after = h.cfg.Clock().Add(-window)
	}
	out := &deadSections{Window: window}
	dg, ok := h.store.(store.DeadGrouper)
	if !ok {
		return h.scanSections(r, kind, after, out)
	}
	out.All = true
	section := func(p store.DeadGroupsParams) ([]*deadGroup, int, int64, error) {
		p.DiedAfter, p.Limit = after, deadGroupsShown
		rep, err := dg.DeadGroups(r.Context(), &p)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("dead groups: %w", err)
		}
		var gs []*deadGroup
		for _, sg := range rep.Groups {
			g := newDeadGroup(sg.Kind, sg.Error)
			g.Count, g.Newest, g.Sample = sg.Count, sg.Newest, sg.Sample
			g.View = deadView{Upto: sg.Newest, After: after, Count: sg.Count}
			if sg.Kind == CallbackKind && h.readOnly(r) {
				g.Error = hideAddrs(cutLastWord(g.Error))
			}
			gs = append(gs, g)
		}
		return gs, rep.Total - len(rep.Groups), rep.Jobs, nil
	}
	var err error
	if kind != CallbackKind {
		p := store.DeadGroupsParams{ExceptKinds: []string{CallbackKind}}
		if kind != "" {
			p.Kinds = []string{kind}
		}
		if out.Groups, out.MoreApp, out.AppJobs, err = section(p); err != nil {
			return nil, err
		}
	}
	if kind == "" || kind == CallbackKind {
		if out.Callbacks, out.MoreCalls, out.CallbackJobs, err = section(store.DeadGroupsParams{Kinds: []string{CallbackKind}}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scanSections is deadSectionsOf for a store that does not group dead
// jobs: the groups of the newest deadScan.
func (h *Handler) scanSections(r *http.Request, kind string, after time.Time, out *deadSections) (*deadSections, error) {
	f := ax.JobFilter{States: []ax.State{ax.StateDead}, FinishedAfter: after}
	if kind != "" {
		f.Kinds = []string{kind}
	}
	list, err := h.reader(r).List(r.Context(), ax.ListOptions{Filter: f, Limit: deadScan, PreviewBytes: ListPreviewBytes})
	if err != nil {
		return nil, err
	}
	view := deadView{After: after}
	for _, rec := range list.Jobs {
		if rec.FinishedAt.After(view.Upto) {
			view.Upto = rec.FinishedAt
		}
	}
	if list.Cursor != "" {
		// More dead jobs than the scan read: an action must not reach
		// past the oldest it read.
		view.From = list.Jobs[len(list.Jobs)-1].ID
	}
	out.Scanned = len(list.Jobs)
	for _, g := range groupDead(h.allForCaller(r, list.Jobs)) {
		g.View = view
		g.View.Count = g.Count
		if g.Kind == CallbackKind {
			out.Callbacks = append(out.Callbacks, g)
		} else {
			out.Groups = append(out.Groups, g)
		}
	}
	if n := len(out.Groups); n > deadGroupsShown {
		out.Groups, out.MoreApp = out.Groups[:deadGroupsShown], n-deadGroupsShown
	}
	if n := len(out.Callbacks); n > deadGroupsShown {
		out.Callbacks, out.MoreCalls = out.Callbacks[:deadGroupsShown], n-deadGroupsShown
	}
	return out, nil
}

// groupJobs lists the dead jobs of kind that a page drawn with view
// counted in the group named key and that still are as it counted them
// (died no later than view.Upto, not before view.After, no older than
// view.From), at most view.Count and deadActMax of them, and the group's
// error line; cut reports that more were left for another press.
func (h *Handler) groupJobs(r *http.Request, kind, key string, view deadView) (ids []uuid.UUID, line string, cut bool, err error) {
	f := ax.JobFilter{States: []ax.State{ax.StateDead}, Kinds: []string{kind},
		FinishedAfter: view.After, FinishedBefore: view.Upto.Add(time.Microsecond)}
	most := min(view.Count, deadActMax)
	opts := ax.ListOptions{Filter: f, Limit: deadScan, PreviewBytes: ListPreviewBytes}
	for {
		list, err := h.admin.List(r.Context(), opts)
		if err != nil {
			return nil, "", false, err
		}
		for _, rec := range list.Jobs {
			if view.From != uuid.Nil && bytes.Compare(rec.ID[:], view.From[:]) < 0 {
				// Newest first: every job from here on is older than the
				// scan reached.
				return ids, line, false, nil
			}
			if l := store.DeadErrorLine(rec); groupKey(kind, l) == key {
				if int64(len(ids)) == most {
					return ids, line, true, nil
				}
				ids, line = append(ids, rec.ID), l
			}
		}
		if list.Cursor == "" {
			return ids, line, false, nil
		}
		opts.Cursor = list.Cursor
	}
}

// postDeadGroup retries or discards (deletes) the dead jobs of one
// group as the page showed it: form fields kind, group (its key), and
// the deadView (upto, after, from, count).
func (h *Handler) postDeadGroup(discard bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		kind, key := r.PostForm.Get("kind"), r.PostForm.Get("group")
		if kind == "" {
			return "", "", badRequest("no kind given")
		}
		if b, err := hex.DecodeString(key); err != nil || len(b) != 8 {
			return "", "", badRequest("%q does not name a group", key)
		}
		view, err := parseDeadView(r.PostForm)
		if err != nil {
			return "", "", err
		}
		ids, line, cut, err := h.groupJobs(r, kind, key, view)
		if err != nil {
			return "", "", err
		}
		if len(ids) == 0 {
			return "", "", problem(http.StatusNotFound, ProblemNotFound, "no dead job of this kind has this error any more (retried or discarded already?)")
		}
		verb, do := "Retried", h.admin.RetryJobs
		if discard {
			verb, do = "Discarded", h.admin.DeleteJobs
		}
		n := 0
		for chunk := range slices.Chunk(ids, store.MaxFilterValues) {
			// By ID, and only while still dead: a job retried meanwhile is
			// left alone.
			k, err := do(r.Context(), ax.JobFilter{IDs: chunk, Kinds: []string{kind}, States: []ax.State{ax.StateDead}})
			n += k
			if err != nil {
				return "", "", err
			}
		}
		msg := fmt.Appendf(nil, "%s %d dead job(s) of %s", verb, n, kind)
		if int64(n) < view.Count {
			msg = fmt.Appendf(msg, " (of %d shown", view.Count)
			if cut {
				msg = fmt.Appendf(msg, "; press again for the rest")
			}
			msg = append(msg, ')')
		}
		msg = fmt.Appendf(msg, ": %s", shownLine(line))
		// The flash cookie carries at most 300 bytes.
		return cutUTF8(msg, 290), "/dead", nil
	}
}

// cutLastWord drops the last word of a line the store cut at
// store.DeadErrorLineRunes: it may be the start of an address, which
// hideAddrs would not recognize whole.
func cutLastWord(line string) string {
	if utf8.RuneCountInString(line) < store.DeadErrorLineRunes {
		return line
	}
	if i := strings.LastIndexAny(line, " \t"); i > 0 {
		line = line[:i]
	}
	return line + " …"
}
