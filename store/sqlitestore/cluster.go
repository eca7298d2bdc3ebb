package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/axsched/ax/store"
)

// AcquireLeader takes or renews the named leadership lease in one
// transaction; see store.Leaser. Expiry is compared with the store's
// clock. Invalid params fail with an error wrapping store.ErrInvalidParams.
func (s *Store) AcquireLeader(ctx context.Context, params *store.LeaderParams) (*store.Leadership, error) {
	if params == nil {
		return nil, fmt.Errorf("acquire leader: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("acquire leader: %w", err)
	}
	var out *store.Leadership
	err := s.write(ctx, func(w *wtx) error {
		l, err := w.leader(params.Name)
		if err != nil {
			return err
		}
		switch {
		case l == nil:
			l = &store.Leadership{Holder: params.Holder, Term: 1}
		case l.Holder == params.Holder:
			// Renewal: the term is kept.
		case !l.ExpiresAt.After(w.now):
			l.Holder = params.Holder
			l.Term++
		default:
			out = l
			return nil
		}
		l.ExpiresAt = w.now.Add(params.TTL)
		l.ExpiresAt = fromUS(l.ExpiresAt.UnixMicro())
		if _, err := w.exec(qLeaderPut, params.Name, l.Holder, l.Term, toUS(l.ExpiresAt)); err != nil {
			return err
		}
		l.Held = true
		out = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("acquire leader %q: %w", params.Name, err)
	}
	return out, nil
}

// leader reads the named lease, or nil.
func (w *wtx) leader(name string) (*store.Leadership, error) {
	var l store.Leadership
	var expires int64
	err := w.queryRow(qLeaderGet, name).Scan(&l.Holder, &l.Term, &expires)
	if isNoRows(err) {
		return nil, nil
	}
	l.ExpiresAt = fromUS(expires)
	return &l, err
}

// ReleaseLeader frees the named lease if holder holds it; see
// store.Leaser. The term is kept and the holder cleared, so the next
// holder, the releasing node included, starts a new term.
func (s *Store) ReleaseLeader(ctx context.Context, name, holder string) (bool, error) {
	if err := checkNames(name, holder); err != nil {
		return false, fmt.Errorf("release leader: %w", err)
	}
	released := false
	err := s.write(ctx, func(w *wtx) error {
		l, err := w.leader(name)
		if err != nil || l == nil || l.Holder != holder || !l.ExpiresAt.After(w.now) {
			return err
		}
		if _, err := w.exec(qLeaderPut, name, "", l.Term, toUS(w.now)); err != nil {
			return err
		}
		released = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("release leader %q: %w", name, err)
	}
	return released, nil
}

// Leader returns the named leadership lease as it is at the store's now;
// see store.LeaderReader. A name never held reads as a zero Leadership.
func (s *Store) Leader(ctx context.Context, name string) (*store.Leadership, error) {
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("read leader: %w: name: %w", store.ErrInvalidParams, err)
	}
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("read leader %q: %w", name, err)
	}
	now := s.clock()
	out := &store.Leadership{}
	err := s.read(ctx, false, func(r *rtx) error {
		var holder string
		var term, expires int64
		err := r.queryRow(qLeaderGet, name).Scan(&holder, &term, &expires)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		out.Term = term
		if holder != "" && fromUS(expires).After(now) {
			out.Held, out.Holder, out.ExpiresAt = true, holder, fromUS(expires)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read leader %q: %w", name, err)
	}
	return out, nil
}

// checkNames reports, wrapping store.ErrInvalidParams, the first of names
// that a database could not keep (store.CheckText).
func checkNames(names ...string) error {
	for _, s := range names {
		if err := store.CheckText(s, 0); err != nil {
			return fmt.Errorf("%w: text %q: %w", store.ErrInvalidParams, s, err)
		}
	}
	return nil
}

// HeartbeatNode registers a node or records its heartbeat; see
// store.NodeRegistry. Params that NodeParams.Validate refuses fail with an
// error wrapping store.ErrInvalidParams and register nothing.
func (s *Store) HeartbeatNode(ctx context.Context, params *store.NodeParams) error {
	if params == nil {
		return fmt.Errorf("node heartbeat: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	kinds, err := json.Marshal(append([]string{}, params.Kinds...))
	if err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	keyIDs, err := json.Marshal(append([]string{}, params.KeyIDs...))
	if err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	err = s.write(ctx, func(w *wtx) error {
		now := toUS(w.now)
		_, err := w.exec(qNodePut, params.Name, params.Version, string(kinds), string(keyIDs), now, now, toUS(w.now.Add(params.TTL)))
		return err
	})
	if err != nil {
		return fmt.Errorf("node heartbeat %q: %w", params.Name, err)
	}
	return nil
}

// StopNode marks a node stopped; see store.NodeRegistry.
func (s *Store) StopNode(ctx context.Context, name string) (bool, error) {
	if err := checkNames(name); err != nil {
		return false, fmt.Errorf("stop node: %w", err)
	}
	stopped := false
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qNodeStop, toUS(w.now), name)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		stopped = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("stop node %q: %w", name, err)
	}
	return stopped, nil
}

// ListNodes returns the registered nodes, by StartedAt then Name.
func (s *Store) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	var out []*store.NodeRecord
	err := s.read(ctx, false, func(r *rtx) error {
		var err error
		out, err = scanNodes(r.query(qNodesAll))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	slices.SortFunc(out, func(a, b *store.NodeRecord) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return compareStrings(a.Name, b.Name)
	})
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReapNodes marks lapsed running nodes dead and removes old stopped and
// dead ones, in one transaction; see store.NodeRegistry. Names come back
// in byte order.
func (s *Store) ReapNodes(ctx context.Context, params *store.ReapParams) (dead, removed []string, err error) {
	if params == nil || params.Retention < 0 {
		return nil, nil, fmt.Errorf("reap nodes: %w: retention must be >= 0", store.ErrInvalidParams)
	}
	err = s.write(ctx, func(w *wtx) error {
		dead, removed = nil, nil
		nodes, err := scanNodes(w.query(qNodesAll))
		if err != nil {
			return err
		}
		horizon := w.now.Add(-params.Retention)
		for _, n := range nodes {
			switch {
			case n.State == store.NodeRunning && !n.ExpiresAt.After(w.now):
				if _, err := w.tx.ExecContext(w.ctx, `UPDATE nodes SET state = 'dead' WHERE name = ?`, n.Name); err != nil {
					return err
				}
				dead = append(dead, n.Name)
			case n.State != store.NodeRunning && n.ExpiresAt.Before(horizon):
				if _, err := w.exec(qNodeDelete, n.Name); err != nil {
					return err
				}
				removed = append(removed, n.Name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reap nodes: %w", err)
	}
	slices.Sort(dead)
	slices.Sort(removed)
	return dead, removed, nil
}

// scanNodes reads the rows of qNodesAll.
func scanNodes(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}, err error) ([]*store.NodeRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.NodeRecord
	for rows.Next() {
		var (
			n                      store.NodeRecord
			kinds, keyIDs, state   string
			started, beat, expires int64
		)
		if err := rows.Scan(&n.Name, &n.Version, &kinds, &keyIDs, &state, &started, &beat, &expires); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(kinds), &n.Kinds); err != nil {
			return nil, fmt.Errorf("node %q kinds: %w", n.Name, err)
		}
		if len(n.Kinds) == 0 {
			n.Kinds = nil
		}
		if err := json.Unmarshal([]byte(keyIDs), &n.KeyIDs); err != nil {
			return nil, fmt.Errorf("node %q key IDs: %w", n.Name, err)
		}
		if len(n.KeyIDs) == 0 {
			n.KeyIDs = nil
		}
		n.State = store.NodeState(state)
		n.StartedAt, n.HeartbeatAt, n.ExpiresAt = fromUS(started), fromUS(beat), fromUS(expires)
		out = append(out, &n)
	}
	return out, rows.Err()
}
