package axhttp

import (
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Finding a job by its ID or the start of it, as an operator copies it
// from a log line or a page ("01a233ed…5bfcf2" shows the first 8). A
// whole ID is one read. A prefix is ax.Admin.FindByIDPrefix: one listing
// from the prefix's place in the ID order, so a job is found however old
// it is. One match opens the job; several are listed (up to findShown);
// none says so.

// findShown is how many jobs a shared prefix lists at most.
const findShown = 100

type findBody struct {
	Query   string
	Jobs    []*store.JobRecord
	More    bool // more than findShown jobs start with Query
	Problem string
}

func (b findBody) pageError() string { return b.Problem }

// findPage is GET /find?id=...
func (h *Handler) findPage(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("id"))
	body := findBody{Query: q}
	if id, err := uuid.Parse(q); err == nil {
		if _, err := h.reader(r).Get(r.Context(), id); err == nil {
			http.Redirect(w, r, basePath(r)+"/jobs/"+id.String(), http.StatusSeeOther)
			return
		}
		body.Problem = "No job has this ID."
		h.render(w, r, http.StatusNotFound, "find", "Find a job", body)
		return
	}
	// In brief: the page shows each job's ID, kind and state, and a
	// prefix may name a hundred jobs of 1 MB payloads.
	jobs, err := h.reader(r).FindByIDPrefixBrief(r.Context(), q, findShown+1, ListPreviewBytes)
	switch {
	case errors.Is(err, ax.ErrInvalidIDPrefix):
		body.Problem = "Give a job ID, or at least its first 4 hexadecimal digits."
		h.render(w, r, http.StatusBadRequest, "find", "Find a job", body)
		return
	case err != nil:
		p := problemFor(r, err)
		body.Problem = p.Detail
		h.render(w, r, p.Status, "find", "Find a job", body)
		return
	case len(jobs) == 1:
		http.Redirect(w, r, basePath(r)+"/jobs/"+jobs[0].ID.String(), http.StatusSeeOther)
		return
	case len(jobs) == 0:
		body.Problem = "No job's ID starts with " + q + "."
		h.render(w, r, http.StatusNotFound, "find", "Find a job", body)
		return
	}
	if len(jobs) > findShown {
		jobs, body.More = jobs[:findShown], true
	}
	body.Jobs = h.allForCaller(r, jobs)
	h.render(w, r, http.StatusOK, "find", "Find a job", body)
}
