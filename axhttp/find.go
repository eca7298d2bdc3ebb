package axhttp

import (
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Finding a job by its ID or the start of it, as an operator copies it
// from a log line or a page ("01a233ed…5bfcf2" shows the first 8). A
// whole ID is one read. A prefix is looked for among the newest findScan
// jobs only (the store has no index on ID prefixes to ask): one match
// opens the job, several are listed, none says where it looked.

// findScan is how many of the newest jobs a prefix is matched against.
const findScan = store.MaxListLimit

// minPrefix is the shortest prefix looked for.
const minPrefix = 4

type findBody struct {
	Query   string
	Jobs    []*store.JobRecord
	Scanned int
	Problem string
}

func (b findBody) pageError() string { return b.Problem }

// findPage is GET /find?id=...
func (h *Handler) findPage(w http.ResponseWriter, r *http.Request) {
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("id")))
	q = strings.TrimRight(strings.SplitN(q, "…", 2)[0], ".")
	body := findBody{Query: q}
	if id, err := uuid.Parse(q); err == nil {
		if _, err := h.admin.Get(r.Context(), id); err == nil {
			http.Redirect(w, r, basePath(r)+"/jobs/"+id.String(), http.StatusSeeOther)
			return
		}
		body.Problem = "No job has this ID."
		h.render(w, r, http.StatusNotFound, "find", "Find a job", body)
		return
	}
	if len(strings.ReplaceAll(q, "-", "")) < minPrefix || strings.Trim(q, "0123456789abcdef-") != "" || len(q) > 36 {
		body.Problem = "Give a job ID, or at least its first 4 hexadecimal digits."
		h.render(w, r, http.StatusBadRequest, "find", "Find a job", body)
		return
	}
	list, err := h.admin.List(r.Context(), ax.ListOptions{Limit: findScan})
	if err != nil {
		p := problemFor(r, err)
		body.Problem = p.Detail
		h.render(w, r, p.Status, "find", "Find a job", body)
		return
	}
	body.Scanned = len(list.Jobs)
	for _, j := range list.Jobs {
		if strings.HasPrefix(j.ID.String(), q) {
			body.Jobs = append(body.Jobs, j)
		}
	}
	if len(body.Jobs) == 1 {
		http.Redirect(w, r, basePath(r)+"/jobs/"+body.Jobs[0].ID.String(), http.StatusSeeOther)
		return
	}
	body.Jobs = h.allForCaller(r, body.Jobs)
	status := http.StatusOK
	if len(body.Jobs) == 0 {
		status = http.StatusNotFound
	}
	h.render(w, r, status, "find", "Find a job", body)
}
