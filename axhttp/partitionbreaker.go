package axhttp

import (
	"net/http"

	"github.com/axsched/ax"
)

// The API of partition breakers (ax.PartitionBreaker): GET
// /kinds/{kind}/partitions lists a kind's failing partitions, POST
// /kinds/{kind}/partitions/open?key=K and .../close?key=K steer one
// (key= names the partition of the jobs without a key). The key is a
// query parameter, not a path segment, since keys may hold slashes.

// partitionBreakers lists the breakers kept for the kind's partitions
// (Admin.PartitionBreakers), in partition key order, a page at a time
// as GET /kinds lists kinds (writePage: limit, after, X-Total-Count,
// Link): a key's jobs may name thousands of partitions that fail. 404
// for a kind without a partition breaker.
func (h *Handler) partitionBreakers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, partsParams)
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	list, err := h.admin.PartitionBreakers(r.Context(), r.PathValue("kind"))
	if err != nil {
		writeProblem(w, r, problemFor(r, err))
		return
	}
	writePage(w, r, list, func(p ax.PartitionBreakerState) string { return p.PartitionKey }, limit)
}

// partitionBreakerAction opens or closes the breaker of the partition
// named by the query's key (required; empty names the jobs without a
// key) and returns it.
func (h *Handler) partitionBreakerAction(open bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		err := checkParams(q, []string{"key"})
		if err == nil && !q.Has("key") {
			err = badRequest("key: the partition key is required (key= names the jobs without one)")
		}
		var p *ax.PartitionBreakerState
		if err == nil {
			set := h.admin.ClosePartitionBreaker
			if open {
				set = h.admin.OpenPartitionBreaker
			}
			p, err = set(r.Context(), r.PathValue("kind"), q.Get("key"))
		}
		if err != nil {
			writeProblem(w, r, problemFor(r, err))
			return
		}
		writeJSON(w, http.StatusOK, p)
	}
}
