package store

import "time"

// UnhandledKinds returns, ordered by kind, the kinds of due that no node
// handles and has not handled for grace: a job of such a kind waits until
// a host that handles it runs, which for a misspelt kind, or hosts
// deployed without its handler, is never. It reads only what a store
// keeps (NodeRegistry.ListNodes and DueInspector.OldestDue), with
// due.Now as the store's clock, so every process on the store (hosts, the
// CLI, the dashboard) finds the same kinds. A kind is unhandled when all
// of these hold:
//
//   - no live node lists it: a node is live while it is running and its
//     ExpiresAt has not passed;
//   - its oldest due job (DueReport) was due grace or more ago;
//   - no node that lists it stopped or lapsed (ExpiresAt) within grace,
//     so a rolling deploy, which stops a kind's last host before its
//     successor registers, is not reported;
//   - the cluster's oldest live node started (StartedAt) grace or more
//     ago, so a cluster that is starting, whose other hosts have not
//     registered yet, is not reported. With no live node at all, every
//     kind that meets the conditions above is unhandled.
//
// A paused kind's jobs are due all the same, so a paused kind no node
// handles is reported too. Grace must be positive.
func UnhandledKinds(nodes []*NodeRecord, due *DueReport, grace time.Duration) []KindDue {
	if due == nil || len(due.Kinds) == 0 {
		return nil
	}
	now := due.Now
	horizon := now.Add(-grace)
	live := make(map[string]bool)
	recent := make(map[string]bool) // handled by a node gone within grace
	var oldestStart time.Time
	for _, n := range nodes {
		if n.State == NodeRunning && !n.ExpiresAt.Before(now) {
			if oldestStart.IsZero() || n.StartedAt.Before(oldestStart) {
				oldestStart = n.StartedAt
			}
			for _, k := range n.Kinds {
				live[k] = true
			}
			continue
		}
		if n.ExpiresAt.After(horizon) {
			for _, k := range n.Kinds {
				recent[k] = true
			}
		}
	}
	if !oldestStart.IsZero() && oldestStart.After(horizon) {
		return nil // the cluster is starting
	}
	var out []KindDue
	for _, k := range due.Kinds {
		if live[k.Kind] || recent[k.Kind] || k.OldestRunAt.After(horizon) {
			continue
		}
		out = append(out, k)
	}
	return out
}
