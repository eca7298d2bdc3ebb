package ax

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax/store"
)

// Every node lists the IDs of the keys in its ring with its heartbeat
// (store.NodeParams.KeyIDs, current key first), never the keys. The leader
// compares them: a running node that seals with a key some other running
// node does not hold makes jobs that node cannot open (they wait there,
// Config.KeyMissingDelay at a time, for a host that has the key). That is
// the mistake of a key rotation done in one step, so the leader says which
// key and which nodes, once per change, and the docs' two-phase rotation
// (add the key everywhere as an older key, then make it current) is
// checkable with `ax nodes`, which shows each node's keys.

// keyCheckEvery is how often the leader compares the nodes' keys.
const keyCheckEvery = time.Minute

// keyWatch is what the leader last said about the nodes' keys.
type keyWatch struct {
	checkedAt time.Time
	said      string // the warning last logged, "" for none
}

// keyIDs returns the IDs of the Scheduler's keys, current first, for its
// heartbeat (nil without Config.Keys).
func keyIDs(ring *KeyRing) []string {
	if ring == nil {
		return nil
	}
	ids := ring.IDs()
	cur := ring.Current()
	out := make([]string, 0, len(ids))
	out = append(out, cur)
	for _, id := range ids {
		if id != cur {
			out = append(out, id)
		}
	}
	if len(out) > store.MaxNodeKeys {
		out = out[:store.MaxNodeKeys]
	}
	return out
}

// missingKeys returns, for the running nodes, each key some node seals
// with (its first ID) that other running nodes do not hold, with those
// nodes, sorted: "key k2 (current on a) is missing on b, c".
func missingKeys(nodes []*store.NodeRecord) []string {
	var running []*store.NodeRecord
	for _, n := range nodes {
		if n.State == store.NodeRunning {
			running = append(running, n)
		}
	}
	current := map[string][]string{} // key → nodes sealing with it
	for _, n := range running {
		if len(n.KeyIDs) > 0 {
			current[n.KeyIDs[0]] = append(current[n.KeyIDs[0]], n.Name)
		}
	}
	var out []string
	for key, sealers := range current {
		var missing []string
		for _, n := range running {
			if !slices.Contains(n.KeyIDs, key) {
				missing = append(missing, n.Name)
			}
		}
		if len(missing) > 0 {
			slices.Sort(sealers)
			slices.Sort(missing)
			out = append(out, fmt.Sprintf("key %s (current on %s) is missing on %s",
				key, strings.Join(sealers, ", "), strings.Join(missing, ", ")))
		}
	}
	slices.Sort(out)
	return out
}

// checkKeys, on the leader and at most every keyCheckEvery, warns when a
// running node seals with a key other running nodes do not hold, and
// says so again only when that changes.
func (c *cluster) checkKeys() {
	r, w := c.r, &c.keys
	if c.registry == nil || !c.isLeader() {
		w.said = ""
		return
	}
	now := r.s.now()
	if !w.checkedAt.IsZero() && now.Sub(w.checkedAt) < keyCheckEvery && !now.Before(w.checkedAt) {
		return
	}
	w.checkedAt = now
	ctx, cancel := c.callCtx()
	defer cancel()
	nodes, err := c.registry.ListNodes(ctx)
	if err != nil {
		if r.life.Err() == nil {
			r.log.Warn("list nodes for their keys failed", zap.Error(err))
		}
		return
	}
	missing := missingKeys(nodes)
	said := strings.Join(missing, "; ")
	if said == w.said {
		return
	}
	w.said = said
	if said == "" {
		r.log.Info("every running node holds every key another one seals with")
		return
	}
	r.log.Warn("a node seals with a key other nodes do not hold: they cannot run the jobs it seals "+
		"(each waits Config.KeyMissingDelay at a time for a host that has the key); "+
		"add a new key to every host as an older key before making it current",
		zap.Strings("missing", missing))
}
