package store

import (
	"context"
	"fmt"
	"time"
)

// LeaderParams asks for a named leadership lease.
type LeaderParams struct {
	// Name names the leadership (one lease per name), e.g. "maintenance".
	Name string
	// Holder names the node asking for it.
	Holder string
	// TTL is how long the lease lasts from the store's now unless renewed
	// (> 0).
	TTL time.Duration
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *LeaderParams) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: empty leadership name", ErrInvalidParams)
	case p.Holder == "":
		return fmt.Errorf("%w: empty leadership holder", ErrInvalidParams)
	case p.TTL <= 0:
		return fmt.Errorf("%w: leadership TTL %s <= 0", ErrInvalidParams, p.TTL)
	}
	if err := CheckText(p.Name, MaxKindLength); err != nil {
		return fmt.Errorf("%w: leadership name: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.Holder, MaxKindLength); err != nil {
		return fmt.Errorf("%w: leadership holder: %w", ErrInvalidParams, err)
	}
	return nil
}

// Leadership is the state of a leadership lease after an AcquireLeader
// call.
type Leadership struct {
	// Held reports whether the caller holds the lease now.
	Held bool `json:"held"`
	// Holder is the node holding the lease ("" when nobody does).
	Holder string `json:"holder"`
	// Term is the fencing number of the holder's tenure. It grows by at
	// least one every time the lease passes to another node, or back to a
	// node after it released it; renewals keep it. Zero when nobody ever
	// held the lease.
	Term int64 `json:"term"`
	// ExpiresAt is when the lease lapses unless renewed (store clock).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Leaser is implemented by stores that can elect one leader among the
// hosts sharing them: a named lease row with a TTL compared in the store's
// clock.
//
// Lease lifecycle for one name:
//
//	free ──AcquireLeader(A)──▶ held by A, term n
//	held by A ──AcquireLeader(A)──▶ held by A, term n (expiry pushed)
//	held by A ──AcquireLeader(B) before expiry──▶ unchanged, Held=false for B
//	held by A ──expiry passes──▶ free (term n kept for the next holder: n+1)
//	held by A ──ReleaseLeader(A)──▶ free at once, no holder (term n kept for the next holder: n+1)
type Leaser interface {
	// AcquireLeader takes the lease for params.Holder when it is free
	// (never held, expired or released) and renews it when params.Holder
	// already holds it (even past its expiry, as long as nobody took it
	// meanwhile). It returns the lease as it is afterwards. One atomic
	// operation: two concurrent callers never both get Held = true.
	AcquireLeader(ctx context.Context, params *LeaderParams) (*Leadership, error)

	// ReleaseLeader frees the named lease at once if holder holds it
	// (unexpired), so the next AcquireLeader succeeds without waiting for
	// the TTL. The term is kept, so the next holder, the releasing node
	// included, gets a higher one. It reports whether holder held it.
	ReleaseLeader(ctx context.Context, name, holder string) (bool, error)
}

// NodeState is a registered node's life-cycle position.
//
//	(none) ──HeartbeatNode──▶ running ──StopNode──▶ stopped ──ReapNodes after retention──▶ (removed)
//	                            │ no heartbeat until ExpiresAt
//	                            ▼
//	                  ReapNodes marks dead ──ReapNodes after retention──▶ (removed)
//
// A stopped or dead node that heartbeats again is running again.
type NodeState string

// Node states.
const (
	// NodeRunning: the node heartbeats.
	NodeRunning NodeState = "running"
	// NodeStopped: the node stopped gracefully (StopNode).
	NodeStopped NodeState = "stopped"
	// NodeDead: the node stopped heartbeating without stopping (crash,
	// partition, pause); marked by ReapNodes.
	NodeDead NodeState = "dead"
)

// NodeParams registers a node or records its heartbeat.
type NodeParams struct {
	// Name identifies the node: a non-empty text (CheckText) of at most
	// MaxKindLength bytes.
	Name string
	// Version is free text naming the software the node runs (a text of
	// at most MaxKindLength bytes).
	Version string
	// Kinds lists the job kinds the node handles.
	Kinds []string
	// KeyIDs lists the IDs of the encryption keys the node holds, its
	// current key first (nil: it holds none). Never key material: the IDs
	// tell operators and other nodes which hosts can open what a key
	// seals, so that a key is made current only once every host holds it,
	// and so that a process without keys can see that its cluster
	// encrypts. At most MaxNodeKeys, each a text of at most
	// MaxKindLength bytes.
	KeyIDs []string
	// TTL is how long after this heartbeat the node counts as alive
	// (> 0): ExpiresAt = store now + TTL.
	TTL time.Duration
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *NodeParams) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: empty node name", ErrInvalidParams)
	case p.TTL <= 0:
		return fmt.Errorf("%w: node TTL %s <= 0", ErrInvalidParams, p.TTL)
	}
	if err := CheckText(p.Name, MaxKindLength); err != nil {
		return fmt.Errorf("%w: node name: %w", ErrInvalidParams, err)
	}
	if err := CheckText(p.Version, MaxKindLength); err != nil {
		return fmt.Errorf("%w: node version: %w", ErrInvalidParams, err)
	}
	for _, k := range p.Kinds {
		if err := CheckText(k, MaxKindLength); err != nil {
			return fmt.Errorf("%w: node kind: %w", ErrInvalidParams, err)
		}
	}
	if len(p.KeyIDs) > MaxNodeKeys {
		return fmt.Errorf("%w: %d node key IDs > %d", ErrInvalidParams, len(p.KeyIDs), MaxNodeKeys)
	}
	for _, k := range p.KeyIDs {
		if k == "" {
			return fmt.Errorf("%w: empty node key ID", ErrInvalidParams)
		}
		if err := CheckText(k, MaxKindLength); err != nil {
			return fmt.Errorf("%w: node key ID: %w", ErrInvalidParams, err)
		}
	}
	return nil
}

// MaxNodeKeys is how many key IDs a node may list (NodeParams.KeyIDs).
const MaxNodeKeys = 64

// NodeRecord is one registered node as the store keeps it.
type NodeRecord struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Kinds   []string `json:"kinds"`
	// KeyIDs are the IDs of the encryption keys the node holds, its
	// current key first, as its latest heartbeat listed them.
	KeyIDs []string  `json:"key_ids,omitempty"`
	State  NodeState `json:"state"`
	// StartedAt is the store time of the node's first heartbeat.
	StartedAt time.Time `json:"started_at"`
	// HeartbeatAt is the store time of its latest heartbeat.
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// ExpiresAt is when a running node without a further heartbeat
	// counts as dead; for a stopped node, when it stopped; for a dead
	// node, when its last heartbeat lapsed.
	ExpiresAt time.Time `json:"expires_at"`
}

// ReapParams says which nodes ReapNodes marks dead and which it removes.
type ReapParams struct {
	// Retention keeps stopped and dead nodes whose ExpiresAt is within
	// Retention of store now (>= 0); older ones are removed.
	Retention time.Duration
}

// NodeRegistry is implemented by stores that keep a registry of the nodes
// (hosts) sharing them, for operators and for leader-side housekeeping.
type NodeRegistry interface {
	// HeartbeatNode registers the node (StartedAt = now) or, when it is
	// registered, records a heartbeat: state running, HeartbeatAt = now,
	// ExpiresAt = now + TTL, Version and Kinds replaced.
	HeartbeatNode(ctx context.Context, params *NodeParams) error

	// StopNode marks the node stopped, ExpiresAt = now. It reports whether
	// the node was registered.
	StopNode(ctx context.Context, name string) (bool, error)

	// ListNodes returns every registered node, ordered by StartedAt then
	// Name.
	ListNodes(ctx context.Context) ([]*NodeRecord, error)

	// ReapNodes marks dead the running nodes whose ExpiresAt passed, and
	// removes the stopped and dead nodes whose ExpiresAt is more than
	// params.Retention before now. It returns the names of the nodes it
	// marked dead and of those it removed.
	ReapNodes(ctx context.Context, params *ReapParams) (dead, removed []string, err error)
}
