package axhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// The job filters of GET /api/v1/jobs and of the dashboard's job list, as
// query parameters mirroring the CLI's flags (ax jobs list):
//
//	kind, state, priority, id   repeatable or comma-separated
//	unique_key, unique_key_prefix, error_contains, node
//	parent                      a job ID: the jobs its end inserted
//	meta=key=value              repeatable
//	run_after, run_before, finished_after, finished_before
//	                            RFC 3339, or a duration meaning that long ago (90m)
//	order=newest|oldest, limit, cursor
//	preview                     bytes of each payload, result and error shown
//	                            (1 to 65536, default ListPreviewBytes)
var filterParams = []string{"kind", "state", "priority", "id", "unique_key", "unique_key_prefix", "error_contains",
	"node", "parent", "meta", "run_after", "run_before", "finished_after", "finished_before"}

var listParams = append([]string{"order", "limit", "cursor", "preview"}, filterParams...)

// ListPreviewBytes is how much of each job's payload, result and latest
// error a listing (GET /api/v1/jobs, the dashboard's lists) reads and
// sends unless the preview parameter says otherwise: listings are in
// brief (ax.ListOptions.PreviewBytes), so a page of 1,000 jobs with 1 MB
// payloads stays a few megabytes. GET /api/v1/jobs/{id} and the job's page
// show the job whole.
const ListPreviewBytes = 1024

// badRequest is a 400 problem.
func badRequest(format string, args ...any) *Problem {
	return problem(http.StatusBadRequest, ProblemBadRequest, fmt.Sprintf(format, args...))
}

// checkParams refuses a parameter not in allowed, so a misspelt filter
// cannot silently select every job.
func checkParams(q url.Values, allowed ...[]string) error {
	for k := range q {
		ok := false
		for _, list := range allowed {
			for _, a := range list {
				ok = ok || a == k
			}
		}
		if !ok {
			return badRequest("unknown query parameter %q", k)
		}
	}
	return nil
}

// values returns the non-empty values of a repeatable, comma-separated
// parameter.
func values(q url.Values, key string) []string {
	var out []string
	for _, v := range q[key] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// parseFilter reads the filter parameters of q; empty values are unset.
func parseFilter(q url.Values, now time.Time) (ax.JobFilter, error) {
	var f ax.JobFilter
	f.Kinds = values(q, "kind")
	for _, s := range values(q, "state") {
		st, err := store.ParseState(strings.ToLower(s))
		if err != nil {
			return f, badRequest("state: unknown state %q", s)
		}
		f.States = append(f.States, st)
	}
	for _, s := range values(q, "priority") {
		p, err := parsePriority(s)
		if err != nil {
			return f, err
		}
		f.Priorities = append(f.Priorities, int(p))
	}
	for _, s := range values(q, "id") {
		id, err := uuid.Parse(s)
		if err != nil {
			return f, badRequest("id: %q is not a job ID", s)
		}
		f.IDs = append(f.IDs, id)
	}
	f.UniqueKey = q.Get("unique_key")
	f.UniqueKeyPrefix = q.Get("unique_key_prefix")
	f.ErrorContains = q.Get("error_contains")
	f.Node = q.Get("node")
	if v := q.Get("parent"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return f, badRequest("parent: %q is not a job ID", v)
		}
		f.Parent = id
	}
	for _, kv := range q["meta"] {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return f, badRequest("meta: want key=value, got %q", kv)
		}
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[k] = v
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"run_after", &f.RunAfter}, {"run_before", &f.RunBefore}, {"finished_after", &f.FinishedAfter}, {"finished_before", &f.FinishedBefore}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		tm, err := parseTimeOrAgo(v, now)
		if err != nil {
			return f, badRequest("%s: %v", t.name, err)
		}
		*t.dst = tm
	}
	return f, nil
}

// parseListOptions reads a listing's parameters of q.
func parseListOptions(q url.Values, now time.Time) (ax.ListOptions, error) {
	f, err := parseFilter(q, now)
	if err != nil {
		return ax.ListOptions{}, err
	}
	opts := ax.ListOptions{Filter: f, Cursor: q.Get("cursor")}
	switch q.Get("order") {
	case "", "newest":
		opts.Order = ax.NewestFirst
	case "oldest":
		opts.Order = ax.OldestFirst
	default:
		return opts, badRequest("order: want newest or oldest, got %q", q.Get("order"))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxListLimit {
			return opts, badRequest("limit: want 1 to %d, got %q", store.MaxListLimit, v)
		}
		opts.Limit = n
	}
	opts.PreviewBytes = ListPreviewBytes
	if v := q.Get("preview"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxPreviewBytes {
			return opts, badRequest("preview: want 1 to %d, got %q", store.MaxPreviewBytes, v)
		}
		opts.PreviewBytes = n
	}
	return opts, nil
}

// parseTimeOrAgo reads an RFC 3339 time, or a duration meaning that long
// before now.
func parseTimeOrAgo(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time or a duration ago (90m), got %q", v)
	}
	return now.Add(-d), nil
}

// parsePriority reads high, normal, low (or 1, 2, 3).
func parsePriority(s string) (ax.PriorityLevel, error) {
	switch strings.ToLower(s) {
	case "high", "1":
		return ax.High, nil
	case "normal", "2":
		return ax.Normal, nil
	case "low", "3":
		return ax.Low, nil
	}
	return 0, badRequest("priority: want high, normal or low, got %q", s)
}
