package ax

// running returns the handlers running on this host by kind, kinds with
// none left out. It reads the runtime's busy counters under r.mu, less
// the jobs taken ahead that wait for a worker (takeahead.go).
func (r *runtime) running() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.busy))
	for kind, n := range r.busy {
		if n > 0 {
			out[kind] = n
		}
	}
	for _, a := range r.waiting {
		if out[a.job.Kind]--; out[a.job.Kind] <= 0 {
			delete(out, a.job.Kind)
		}
	}
	return out
}
