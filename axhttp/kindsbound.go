package axhttp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/axsched/ax"
)

// The per-kind answers of the API, GET /api/v1/kinds and GET
// /api/v1/stats, are bounded however many kinds a key created (issue 41:
// a write key made 20,000 kinds in 20 requests, and every answer listed
// them all): at most limit kinds (KindsLimit unless the limit parameter
// says otherwise, MaxKindsLimit at most), and never more than
// MaxKindsBytes of them.
//
// GET /api/v1/kinds stays a JSON array in name order; it pages: the
// X-Total-Count header counts the kinds (of the prefix), and a Link
// header with rel="next" names the next page (after=the last kind sent)
// when kinds were left out. GET /api/v1/kinds/{kind}/partitions pages a
// kind's partition breakers the same way (writePage), in key order: a
// key's jobs may name thousands of partitions that fail. GET
// /api/v1/stats keeps its object and adds
// kinds_total and truncated; the kinds it keeps are those in trouble
// first (dead jobs, unhandled, the longest due wait), as on the overview.

const (
	// KindsLimit is how many kinds GET /api/v1/kinds and GET
	// /api/v1/stats, and partitions GET /api/v1/kinds/{kind}/partitions,
	// answer with unless their limit parameter says otherwise.
	KindsLimit = 500
	// MaxKindsLimit is the largest limit they take.
	MaxKindsLimit = 5000
	// MaxKindsBytes bounds the kinds' (or partitions') JSON in one such
	// answer: they stop before the one that would pass it (one is always
	// sent).
	MaxKindsBytes = 1 << 20
)

// kindsParams are GET /api/v1/kinds' query parameters, statsParams GET
// /api/v1/stats' and partsParams GET /api/v1/kinds/{kind}/partitions'.
var (
	kindsParams = []string{"limit", "after", "prefix"}
	statsParams = []string{"limit", "prefix", "kind"}
	partsParams = []string{"limit", "after"}
)

// kindsLimit reads the limit parameter of q (KindsLimit when absent).
func kindsLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return KindsLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxKindsLimit {
		return 0, badRequest("limit: want 1 to %d, got %q", MaxKindsLimit, v)
	}
	return n, nil
}

// pageLimit refuses a parameter of q not in allowed and returns the page
// size its limit asks for (kindsLimit): the start of every paged kinds
// answer.
func pageLimit(q url.Values, allowed []string) (int, error) {
	if err := checkParams(q, allowed); err != nil {
		return 0, err
	}
	return kindsLimit(q)
}

// kinds answers GET /api/v1/kinds: the kinds whose name starts with
// prefix, in name order, a page at a time (writePage).
func (h *Handler) kinds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, kindsParams)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	ks, err := h.admin.Kinds(r.Context())
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	prefix := q.Get("prefix")
	ks = slices.DeleteFunc(ks, func(k ax.KindState) bool { return !strings.HasPrefix(k.Kind, prefix) })
	writePage(w, r, ks, func(k ax.KindState) string { return k.Kind }, limit)
}

// writePage answers with a page of items, sorted by key (byte order,
// whatever order the store's collation gave them; no two keys alike), as
// a JSON array: the items whose key sorts after the after parameter
// (every item without it), at most limit of them, and no more
// than MaxKindsBytes of JSON (one item always). X-Total-Count counts
// items; when some after the page were left out, a Link header with
// rel="next" names the next page: the request with after set to the
// last key sent.
func writePage[T any](w http.ResponseWriter, r *http.Request, items []T, key func(T) string, limit int) {
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	q := r.URL.Query()
	start := 0
	if q.Has("after") {
		// An empty key ("", a partition's) sorts first: after="" is after it.
		after := q.Get("after")
		start, _ = slices.BinarySearchFunc(items, after, func(it T, after string) int {
			if key(it) <= after {
				return -1
			}
			return 1
		})
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	sent := 0
	for _, it := range items[start:] {
		if sent == limit {
			break
		}
		row, err := json.Marshal(it)
		if err != nil {
			writeProblem(w, r, problemFor(r, fmt.Errorf("encode %q: %w", key(it), err)))
			return
		}
		if sent > 0 && buf.Len()+1+len(row) > MaxKindsBytes {
			break
		}
		if sent > 0 {
			buf.WriteByte(',')
		}
		buf.Write(row)
		sent++
	}
	buf.WriteByte(']')
	w.Header().Set("X-Total-Count", strconv.Itoa(len(items)))
	if start+sent < len(items) {
		q.Set("after", key(items[start+sent-1]))
		w.Header().Set("Link", "<"+basePath(r)+r.URL.EscapedPath()+"?"+q.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, json.RawMessage(buf.Bytes()))
}

// StatsResponse is the answer of GET /api/v1/stats: ax.Stats with its
// per-kind fields (Queue, OldestDue, Unhandled, Flows, Running) holding
// at most limit kinds and MaxKindsBytes of them, those in trouble first.
type StatsResponse struct {
	*ax.Stats
	// KindsTotal counts the kinds the snapshot names in its per-kind
	// fields (those of the prefix and kind parameters, when given).
	KindsTotal int `json:"kinds_total"`
	// Truncated reports that kinds were left out: a kind absent from the
	// per-kind fields may then have jobs. Ask for it by name (kind=) or
	// by the start of its name (prefix=).
	Truncated bool `json:"truncated"`
}

// troubleKey is what orders kinds trouble first.
type troubleKey struct {
	kind      string
	dead      int64
	unhandled bool
	dueAge    time.Duration
	paused    bool
}

// compareTrouble orders kinds in trouble first: dead jobs (most first),
// then kinds no node handles, then the longest wait of a due job, then
// paused kinds; the rest by name. The overview and GET /api/v1/stats
// keep their first kinds in this order.
func compareTrouble(a, b troubleKey) int {
	return cmp.Or(cmp.Compare(b.dead, a.dead),
		compareBool(b.unhandled, a.unhandled),
		cmp.Compare(b.dueAge, a.dueAge),
		compareBool(b.paused, a.paused),
		strings.Compare(a.kind, b.kind))
}

// statsTrouble returns kind's troubleKey from st (paused is not known).
func statsTrouble(st *ax.Stats, kind string) troubleKey {
	_, unhandled := st.Unhandled[kind]
	return troubleKey{kind: kind, dead: st.Queue[kind][ax.StateDead], unhandled: unhandled, dueAge: st.DueAge(kind)}
}

// statsKind is one kind's part of ax.Stats, to measure it.
type statsKind struct {
	Queue     map[ax.State]int64 `json:"q,omitempty"`
	OldestDue *time.Time         `json:"o,omitempty"`
	Unhandled *time.Time         `json:"u,omitempty"`
	Flow      *ax.FlowState      `json:"f,omitempty"`
	Running   int                `json:"r,omitempty"`
}

// statsKindBytes is an upper bound of the bytes kind adds to the JSON of
// ax.Stats: its part, and its name once in each per-kind field that
// holds it.
func statsKindBytes(st *ax.Stats, kind string) (int, error) {
	p := statsKind{Queue: st.Queue[kind], Running: st.Running[kind]}
	fields := 0
	if _, ok := st.Queue[kind]; ok {
		fields++
	}
	if _, ok := st.Running[kind]; ok {
		fields++
	}
	if t, ok := st.OldestDue[kind]; ok {
		p.OldestDue, fields = &t, fields+1
	}
	if t, ok := st.Unhandled[kind]; ok {
		p.Unhandled, fields = &t, fields+1
	}
	if f, ok := st.Flows[kind]; ok {
		p.Flow, fields = &f, fields+1
	}
	b, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("stats: encode kind %q: %w", kind, err)
	}
	name, err := json.Marshal(kind)
	if err != nil {
		return 0, fmt.Errorf("stats: encode kind %q: %w", kind, err)
	}
	// Each field holding the kind: its name, a colon and a comma.
	return len(b) + fields*(len(name)+2), nil
}

// boundStats returns st with its per-kind fields holding only the kinds
// keep selects, at most limit of them and MaxKindsBytes, trouble first.
func boundStats(st *ax.Stats, keep func(string) bool, limit int) (*StatsResponse, error) {
	names := map[string]bool{}
	for k := range st.Queue {
		names[k] = true
	}
	for k := range st.OldestDue {
		names[k] = true
	}
	for k := range st.Unhandled {
		names[k] = true
	}
	for k := range st.Flows {
		names[k] = true
	}
	for k := range st.Running {
		names[k] = true
	}
	var kinds []troubleKey
	for k := range names {
		if keep(k) {
			kinds = append(kinds, statsTrouble(st, k))
		}
	}
	slices.SortFunc(kinds, compareTrouble)
	out := *st
	out.Queue, out.OldestDue, out.Unhandled, out.Flows, out.Running = nil, nil, nil, nil, nil
	if st.Queue != nil {
		out.Queue = map[string]map[ax.State]int64{}
	}
	if st.OldestDue != nil {
		out.OldestDue = map[string]time.Time{}
	}
	if st.Unhandled != nil {
		out.Unhandled = map[string]time.Time{}
	}
	if st.Flows != nil {
		out.Flows = map[string]ax.FlowState{}
	}
	if st.Running != nil {
		out.Running = map[string]int{}
	}
	res := &StatsResponse{Stats: &out, KindsTotal: len(kinds)}
	size := 0
	for i, k := range kinds {
		n, err := statsKindBytes(st, k.kind)
		if err != nil {
			return nil, err
		}
		if i == limit || (i > 0 && size+n > MaxKindsBytes) {
			res.Truncated = true
			break
		}
		size += n
		copyKind(&out, st, k.kind)
	}
	return res, nil
}

// copyKind copies kind's entries of from's per-kind fields to to's.
func copyKind(to, from *ax.Stats, kind string) {
	if v, ok := from.Queue[kind]; ok {
		to.Queue[kind] = v
	}
	if v, ok := from.OldestDue[kind]; ok {
		to.OldestDue[kind] = v
	}
	if v, ok := from.Unhandled[kind]; ok {
		to.Unhandled[kind] = v
	}
	if v, ok := from.Flows[kind]; ok {
		to.Flows[kind] = v
	}
	if v, ok := from.Running[kind]; ok {
		to.Running[kind] = v
	}
}

// stats answers GET /api/v1/stats, bounded by boundStats.
func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, statsParams)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	prefix, only := q.Get("prefix"), map[string]bool{}
	for _, k := range values(q, "kind") {
		only[k] = true
	}
	keep := func(k string) bool {
		return strings.HasPrefix(k, prefix) && (len(only) == 0 || only[k])
	}
	st, err := h.statsOf(r)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	out, err := boundStats(st, keep, limit)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}
