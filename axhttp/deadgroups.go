package axhttp

import (
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
// when there are more. A group's action lists the kind's newest deadScan
// dead jobs again and acts on exactly those still dead whose error puts
// them in the group, by ID: a job retried, discarded or gone dead with
// another error since the page was drawn is left alone.

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
	ids    []uuid.UUID
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
	return groupDead(h.allForCaller(r, list.Jobs)), len(list.Jobs), nil
}

// postDeadGroup retries or discards (deletes) the dead jobs of one
// group: form fields kind and group (its key).
func (h *Handler) postDeadGroup(discard bool) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		kind, key := r.PostForm.Get("kind"), r.PostForm.Get("group")
		if kind == "" {
			return "", "", badRequest("no kind given")
		}
		if b, err := hex.DecodeString(key); err != nil || len(b) != 8 {
			return "", "", badRequest("%q does not name a group", key)
		}
		groups, _, err := h.deadGroups(r, kind)
		if err != nil {
			return "", "", err
		}
		i := slices.IndexFunc(groups, func(g *deadGroup) bool { return g.Key == key })
		if i < 0 {
			return "", "", problem(http.StatusNotFound, ProblemNotFound, "no dead job of this kind has this error any more (retried or discarded already?)")
		}
		g := groups[i]
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
