package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/axsched/ax/store"
)

// SetKindPaused pauses (paused = true) or resumes kind, cluster-wide, and
// returns its state afterwards; see store.KindPauser. Only paused kinds
// keep a state: a resume drops it. Pausing a paused kind changes nothing
// (UpdatedAt included); resuming a kind that is not paused stores
// nothing and reads with a zero UpdatedAt.
// A resume that changed the state notifies subscribers with an empty-kind
// notification, so that schedulers re-read the paused kinds and claim at
// once. An empty kind, or one that is not a storable text of at most
// store.MaxKindLength bytes, fails with an error wrapping
// store.ErrInvalidParams.
//
// The store itself does not refuse claims of a paused kind: schedulers
// leave paused kinds out of their claims (see store.KindPauser).
func (s *Store) SetKindPaused(ctx context.Context, kind string, paused bool) (*store.KindState, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if kind == "" {
		return nil, fmt.Errorf("%s kind: %w: empty kind", verb, store.ErrInvalidParams)
	}
	if err := store.CheckText(kind, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("%s kind: %w: %w", verb, store.ErrInvalidParams, err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("%s kind %q: %w", verb, kind, err)
	}
	if s.kindStates == nil {
		s.kindStates = make(map[string]*store.KindState)
	}
	ks := s.kindStates[kind]
	changed := false
	switch {
	case ks == nil && !paused:
		// Not paused: nothing to resume, nothing to store.
		ks = &store.KindState{Kind: kind}
	case ks == nil:
		changed = true
		ks = &store.KindState{Kind: kind, Paused: paused, UpdatedAt: s.clock()}
		s.kindStates[kind] = ks
	case !paused:
		// Only a pause is kept: a resumed kind leaves no state behind.
		changed = true
		delete(s.kindStates, kind)
		ks = &store.KindState{Kind: kind, UpdatedAt: s.clock()}
	}
	out := *ks
	s.mu.Unlock()
	if changed { // every host re-reads the paused kinds at once
		s.subs.deliver([]store.Notification{{}})
	}
	return &out, nil
}

// KindStates returns copies of the paused kinds' states, ordered by kind;
// see store.KindPauser.
func (s *Store) KindStates(ctx context.Context) ([]store.KindState, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("kind states: %w", err)
	}
	defer s.mu.Unlock()
	out := make([]store.KindState, 0, len(s.kindStates))
	for _, ks := range s.kindStates {
		out = append(out, *ks)
	}
	slices.SortFunc(out, func(a, b store.KindState) int { return strings.Compare(a.Kind, b.Kind) })
	return out, nil
}

// Leader returns the named leadership lease as it is at the store's now;
// see store.LeaderReader. A name never held reads as a zero Leadership. A
// name that is not a storable text fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) Leader(ctx context.Context, name string) (*store.Leadership, error) {
	if err := store.CheckText(name, store.MaxKindLength); err != nil {
		return nil, fmt.Errorf("read leader: %w: name: %w", store.ErrInvalidParams, err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("read leader %q: %w", name, err)
	}
	defer s.mu.Unlock()
	l := s.cluster.leaders[name]
	if l == nil {
		return &store.Leadership{}, nil
	}
	if l.Holder == "" || !l.ExpiresAt.After(s.clock()) {
		return &store.Leadership{Term: l.Term}, nil
	}
	return &store.Leadership{Held: true, Holder: l.Holder, Term: l.Term, ExpiresAt: l.ExpiresAt}, nil
}
