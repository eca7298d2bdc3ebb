package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Compile-time checks of the cluster interfaces.
var (
	_ store.Leaser       = (*Store)(nil)
	_ store.NodeRegistry = (*Store)(nil)
)

// The leader and nodes tables come from migration 0001. A node's version,
// kinds and state live in its metadata column:
// {"state": "running", "version": "...", "kinds": ["..."]}. A row without a
// state counts as running.

const (
	acquireLeaderSQL = `INSERT INTO {leader} AS l (name, holder, term, elected_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET
	holder     = EXCLUDED.holder,
	term       = CASE WHEN l.holder = EXCLUDED.holder THEN l.term ELSE l.term + 1 END,
	elected_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.elected_at ELSE now() END,
	expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING holder, term, expires_at`

	currentLeaderSQL = `SELECT holder, term, expires_at FROM {leader} WHERE name = $1`

	releaseLeaderSQL = `UPDATE {leader} SET holder = '', expires_at = now()
WHERE name = $1 AND holder = $2 AND expires_at > now()`

	heartbeatNodeSQL = `INSERT INTO {nodes} AS n (name, started_at, heartbeat_at, expires_at, metadata)
VALUES ($1, now(), now(), now() + $2::bigint * interval '1 microsecond', $3)
ON CONFLICT (name) DO UPDATE SET
	heartbeat_at = now(),
	expires_at   = EXCLUDED.expires_at,
	metadata     = coalesce(n.metadata, '{}') || EXCLUDED.metadata`

	stopNodeSQL = `UPDATE {nodes}
SET expires_at = now(), metadata = jsonb_set(coalesce(metadata, '{}'), '{state}', '"stopped"')
WHERE name = $1`

	listNodesSQL = `SELECT name, started_at, heartbeat_at, expires_at, metadata FROM {nodes} ORDER BY started_at, name COLLATE "C"`

	// Both parts see the statement's snapshot: a node marked dead here is
	// removed by a later call, never by this one. Names are sorted in byte
	// order (COLLATE "C"), as memstore sorts them, whatever the database's
	// collation.
	reapNodesSQL = `WITH dead AS (
	UPDATE {nodes} SET metadata = jsonb_set(coalesce(metadata, '{}'), '{state}', '"dead"')
	WHERE coalesce(metadata->>'state', 'running') = 'running' AND expires_at <= now()
	RETURNING name
), removed AS (
	DELETE FROM {nodes}
	WHERE coalesce(metadata->>'state', 'running') <> 'running'
	  AND expires_at < now() - $1::bigint * interval '1 microsecond'
	RETURNING name
)
SELECT coalesce((SELECT array_agg(name ORDER BY name COLLATE "C") FROM dead), '{}'),
       coalesce((SELECT array_agg(name ORDER BY name COLLATE "C") FROM removed), '{}')`
)

// nodeMeta is the JSON kept in a node row's metadata column.
type nodeMeta struct {
	State   store.NodeState `json:"state,omitempty"`
	Version string          `json:"version"`
	Kinds   []string        `json:"kinds"`
	// KeyIDs is always written (an empty list for none): the heartbeat
	// merges its metadata into the row's, and an omitted key would keep
	// the IDs of an earlier heartbeat.
	KeyIDs []string `json:"key_ids"`
}

// clusterSQL substitutes the schema-qualified leader and nodes tables.
func (s *Store) clusterSQL(q string) string {
	return strings.NewReplacer(
		"{leader}", pgx.Identifier{s.schema, "leader"}.Sanitize(),
		"{nodes}", pgx.Identifier{s.schema, "nodes"}.Sanitize(),
	).Replace(q)
}

// AcquireLeader takes or renews the named leadership lease in one
// statement (an upsert guarded by holder and expiry, compared with the
// database's now()); see store.Leaser. When the lease is held by another
// node it reads the current holder. Invalid params, or a name or holder
// PostgreSQL refuses as text, fail with an error wrapping
// store.ErrInvalidParams.
func (s *Store) AcquireLeader(ctx context.Context, params *store.LeaderParams) (*store.Leadership, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: acquire leader: %w", err)
	}
	l := &store.Leadership{Held: true}
	err := s.pool.QueryRow(ctx, s.clusterSQL(acquireLeaderSQL), params.Name, params.Holder, micros(params.TTL)).
		Scan(&l.Holder, &l.Term, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		l.Held = false
		err = s.pool.QueryRow(ctx, s.clusterSQL(currentLeaderSQL), params.Name).Scan(&l.Holder, &l.Term, &l.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return &store.Leadership{}, nil // released and deleted by hand meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: acquire leader %q: %w", params.Name, invalidData(err))
	}
	return l, nil
}

// ReleaseLeader frees the named lease if holder holds it; see
// store.Leaser. A name or holder PostgreSQL refuses as text fails with an
// error wrapping store.ErrInvalidParams.
func (s *Store) ReleaseLeader(ctx context.Context, name, holder string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, s.clusterSQL(releaseLeaderSQL), name, holder)
	if err != nil {
		return false, fmt.Errorf("pgstore: release leader %q: %w", name, invalidData(err))
	}
	return tag.RowsAffected() == 1, nil
}

// HeartbeatNode registers a node or records its heartbeat in one upsert;
// see store.NodeRegistry. Params that NodeParams.Validate refuses, or that
// PostgreSQL refuses as data, fail with an error wrapping
// store.ErrInvalidParams and register nothing.
func (s *Store) HeartbeatNode(ctx context.Context, params *store.NodeParams) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("pgstore: node heartbeat: %w", err)
	}
	kinds := params.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	keyIDs := params.KeyIDs
	if keyIDs == nil {
		keyIDs = []string{}
	}
	meta, err := json.Marshal(nodeMeta{State: store.NodeRunning, Version: params.Version, Kinds: kinds, KeyIDs: keyIDs})
	if err != nil {
		return fmt.Errorf("pgstore: node heartbeat: %w", err)
	}
	if _, err := s.pool.Exec(ctx, s.clusterSQL(heartbeatNodeSQL), params.Name, micros(params.TTL), meta); err != nil {
		return fmt.Errorf("pgstore: node heartbeat %q: %w", params.Name, invalidData(err))
	}
	return nil
}

// StopNode marks a node stopped; see store.NodeRegistry. A name PostgreSQL
// refuses as text fails with an error wrapping store.ErrInvalidParams.
func (s *Store) StopNode(ctx context.Context, name string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, s.clusterSQL(stopNodeSQL), name)
	if err != nil {
		return false, fmt.Errorf("pgstore: stop node %q: %w", name, invalidData(err))
	}
	return tag.RowsAffected() == 1, nil
}

// ListNodes returns the registered nodes by start time then name (in byte
// order); see store.NodeRegistry.
func (s *Store) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.conn(ctx).Query(ctx, s.clusterSQL(listNodesSQL)) // a caller's tx when ctx has one: onetx.go
	if err != nil {
		return nil, fmt.Errorf("pgstore: list nodes: %w", err)
	}
	defer rows.Close()
	out := []*store.NodeRecord{}
	for rows.Next() {
		var n store.NodeRecord
		var raw []byte
		if err := rows.Scan(&n.Name, &n.StartedAt, &n.HeartbeatAt, &n.ExpiresAt, &raw); err != nil {
			return nil, fmt.Errorf("pgstore: list nodes: %w", err)
		}
		var m nodeMeta
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("pgstore: list nodes: decode metadata of %q: %w", n.Name, err)
			}
		}
		n.Version, n.Kinds, n.KeyIDs, n.State = m.Version, m.Kinds, m.KeyIDs, m.State
		if len(n.KeyIDs) == 0 {
			n.KeyIDs = nil
		}
		if n.State == "" {
			n.State = store.NodeRunning
		}
		out = append(out, &n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: list nodes: %w", err)
	}
	return out, nil
}

// ReapNodes marks lapsed running nodes dead and removes old stopped and
// dead ones, in one statement; see store.NodeRegistry.
func (s *Store) ReapNodes(ctx context.Context, params *store.ReapParams) (dead, removed []string, err error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	if params == nil || params.Retention < 0 {
		return nil, nil, fmt.Errorf("pgstore: reap nodes: retention must be >= 0: %w", store.ErrInvalidParams)
	}
	if err := s.pool.QueryRow(ctx, s.clusterSQL(reapNodesSQL), micros(params.Retention)).Scan(&dead, &removed); err != nil {
		return nil, nil, fmt.Errorf("pgstore: reap nodes: %w", err)
	}
	if len(dead) == 0 {
		dead = nil
	}
	if len(removed) == 0 {
		removed = nil
	}
	return dead, removed, nil
}
