package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/axsched/ax/store"
)

// Compile-time checks of the cluster interfaces.
var (
	_ store.Leaser       = (*Store)(nil)
	_ store.NodeRegistry = (*Store)(nil)
)

// cluster holds the leadership leases and the node registry. Guarded by
// Store.mu; the maps are made on first use.
type cluster struct {
	leaders map[string]*store.Leadership
	nodes   map[string]*store.NodeRecord
}

// AcquireLeader takes or renews the named leadership lease; see
// store.Leaser. Expiry is compared with the store's clock. Invalid params,
// or a name or holder that is not a storable text (store.CheckText), fail
// with an error wrapping store.ErrInvalidParams.
func (s *Store) AcquireLeader(ctx context.Context, params *store.LeaderParams) (*store.Leadership, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("acquire leader: %w", err)
	}
	if err := checkTexts(params.Name, params.Holder); err != nil {
		return nil, fmt.Errorf("acquire leader: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("acquire leader: %w", err)
	}
	defer s.mu.Unlock()
	if s.cluster.leaders == nil {
		s.cluster.leaders = make(map[string]*store.Leadership)
	}
	now := s.clock()
	l := s.cluster.leaders[params.Name]
	switch {
	case l == nil:
		l = &store.Leadership{Holder: params.Holder, Term: 1}
		s.cluster.leaders[params.Name] = l
	case l.Holder == params.Holder:
		// Renewal: the term is kept.
	case !l.ExpiresAt.After(now):
		l.Holder = params.Holder
		l.Term++
	default:
		out := *l
		out.Held = false
		return &out, nil
	}
	l.ExpiresAt = stamp(now.Add(params.TTL))
	out := *l
	out.Held = true
	return &out, nil
}

// ReleaseLeader frees the named lease if holder holds it; see
// store.Leaser. A name or holder that is not a storable text fails with an
// error wrapping store.ErrInvalidParams.
func (s *Store) ReleaseLeader(ctx context.Context, name, holder string) (bool, error) {
	if err := checkTexts(name, holder); err != nil {
		return false, fmt.Errorf("release leader: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return false, fmt.Errorf("release leader: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	l := s.cluster.leaders[name]
	if l == nil || l.Holder != holder || !l.ExpiresAt.After(now) {
		return false, nil
	}
	// Expire it rather than delete it: the term must keep growing. The
	// holder is cleared so that the same node acquiring again starts a new
	// term too.
	l.ExpiresAt, l.Holder = now, ""
	return true, nil
}

// HeartbeatNode registers a node or records its heartbeat; see
// store.NodeRegistry. Params that NodeParams.Validate refuses fail with an
// error wrapping store.ErrInvalidParams and register nothing.
func (s *Store) HeartbeatNode(ctx context.Context, params *store.NodeParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	defer s.mu.Unlock()
	if s.cluster.nodes == nil {
		s.cluster.nodes = make(map[string]*store.NodeRecord)
	}
	now := s.clock()
	n := s.cluster.nodes[params.Name]
	if n == nil {
		n = &store.NodeRecord{Name: params.Name, StartedAt: now}
		s.cluster.nodes[params.Name] = n
	}
	n.Version = params.Version
	n.Kinds = slices.Clone(params.Kinds)
	n.KeyIDs = slices.Clone(params.KeyIDs)
	n.State = store.NodeRunning
	n.HeartbeatAt = now
	n.ExpiresAt = stamp(now.Add(params.TTL))
	return nil
}

// StopNode marks a node stopped; see store.NodeRegistry. A name that is
// not a storable text fails with an error wrapping store.ErrInvalidParams.
func (s *Store) StopNode(ctx context.Context, name string) (bool, error) {
	if err := checkTexts(name); err != nil {
		return false, fmt.Errorf("stop node: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return false, fmt.Errorf("stop node: %w", err)
	}
	defer s.mu.Unlock()
	n := s.cluster.nodes[name]
	if n == nil {
		return false, nil
	}
	n.State, n.ExpiresAt = store.NodeStopped, s.clock()
	return true, nil
}

// ListNodes returns copies of the registered nodes, by StartedAt then
// Name.
func (s *Store) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer s.mu.Unlock()
	out := make([]*store.NodeRecord, 0, len(s.cluster.nodes))
	for _, n := range s.cluster.nodes {
		c := *n
		c.Kinds, c.KeyIDs = slices.Clone(n.Kinds), slices.Clone(n.KeyIDs)
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *store.NodeRecord) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// ReapNodes marks lapsed running nodes dead and removes old stopped and
// dead ones; see store.NodeRegistry.
func (s *Store) ReapNodes(ctx context.Context, params *store.ReapParams) (dead, removed []string, err error) {
	if params == nil || params.Retention < 0 {
		return nil, nil, fmt.Errorf("reap nodes: %w: retention must be >= 0", store.ErrInvalidParams)
	}
	if err := s.lock(ctx); err != nil {
		return nil, nil, fmt.Errorf("reap nodes: %w", err)
	}
	defer s.mu.Unlock()
	now := s.clock()
	horizon := now.Add(-params.Retention)
	for name, n := range s.cluster.nodes {
		switch {
		case n.State == store.NodeRunning && !n.ExpiresAt.After(now):
			n.State = store.NodeDead
			dead = append(dead, name)
		case n.State != store.NodeRunning && n.ExpiresAt.Before(horizon):
			delete(s.cluster.nodes, name)
			removed = append(removed, name)
		}
	}
	slices.Sort(dead)
	slices.Sort(removed)
	return dead, removed, nil
}
