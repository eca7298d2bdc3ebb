package ax

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/axsched/ax/store"
)

// A kind's defaults. A job's MaxAttempts and Priority are stored in its
// row when it is scheduled, and the row decides: the executor counts
// attempts against it, and a store's rescue too. So that a job gets the
// same attempts and priority whoever schedules it, the kind's handler
// options are stored with the kind (store.KindDefaulter): every host that
// handles a kind declares its MaxAttempts and Priority at Start (or at
// Handle, once started), and a host that schedules a job of a kind it
// does not handle (ax serve, the HTTP API, a producer-only service) reads
// them, at most once a second per kind (kindDefaultsTTL), in one store
// call per Schedule, ScheduleMany, batch or follow-up set, and for Then
// jobs once per attempt, with its outcome (on CompleteTx's transaction:
// a caller's transaction costs one connection, tx.go). A job's own
// MaxAttempts or Priority option wins over both.
//
// The declaration is the last writer's: while hosts with different
// options for a kind run side by side (a rolling deploy), jobs scheduled
// elsewhere get whichever declared last. A kind no host has declared
// yet, or a store without KindDefaulter, gets Config.MaxAttempts and
// Normal, as before. Nothing that claims, runs or rescues jobs reads the
// declarations, so hosts of older versions keep reading every row as
// they did. Timeout and RetryPolicy are not stored: the host that runs an
// attempt always applies its own kind's, whoever scheduled the job.

// declareKindDefaults stores handlers' MaxAttempts and Priority, with a
// KindDefaulter.
func (s *Scheduler) declareKindDefaults(ctx context.Context, handlers []*kindHandler) error {
	kd, ok := s.store.(store.KindDefaulter)
	if !ok || len(handlers) == 0 {
		return nil
	}
	defaults := make([]store.KindDefaults, len(handlers))
	for i, h := range handlers {
		defaults[i] = store.KindDefaults{Kind: h.kind, MaxAttempts: h.settings.maxAttempts, Priority: int(h.settings.priority)}
	}
	slices.SortFunc(defaults, func(a, b store.KindDefaults) int { return strings.Compare(a.Kind, b.Kind) })
	if err := kd.DeclareKindDefaults(ctx, defaults); err != nil {
		return fmt.Errorf("declare kind defaults: %w", err)
	}
	for _, d := range defaults {
		s.kindDefaults.forget(d.Kind)
	}
	return nil
}

// declareKinds stores what the kinds of handlers declare to the cluster:
// their flow settings and their job defaults.
func (s *Scheduler) declareKinds(ctx context.Context, handlers []*kindHandler) error {
	if err := s.declareFlows(ctx, handlers); err != nil {
		return err
	}
	return s.declareKindDefaults(ctx, handlers)
}

// resolveKindDefaults fills the MaxAttempts and Priority that
// unresolvedParam left zero (no option, no handler here), in params and
// their follow-ups: from the kinds' stored defaults, read in one call, or
// else Config.MaxAttempts and Normal.
func (s *Scheduler) resolveKindDefaults(ctx context.Context, params []store.InsertParams) error {
	var kinds []string
	each := func(fn func(p *store.InsertParams)) {
		for i := range params {
			fn(&params[i])
			for j := range params[i].FollowUps {
				fn(&params[i].FollowUps[j].Job)
			}
		}
	}
	each(func(p *store.InsertParams) {
		if p.MaxAttempts == 0 || p.Priority == 0 {
			kinds = append(kinds, p.Kind)
		}
	})
	if len(kinds) == 0 {
		return nil
	}
	stored, err := s.kindDefaults.get(ctx, s.store, s.now(), kinds)
	if err != nil {
		return err
	}
	each(func(p *store.InsertParams) {
		d, ok := stored[p.Kind]
		if !ok {
			d = store.KindDefaults{MaxAttempts: s.cfg.MaxAttempts, Priority: int(Normal)}
		}
		if p.MaxAttempts == 0 {
			p.MaxAttempts = d.MaxAttempts
		}
		if p.Priority == 0 {
			p.Priority = d.Priority
		}
	})
	return nil
}

// kindDefaultsTTL is how long a Scheduler trusts the kind defaults it
// read: a producer that handles nothing (ax serve, a web tier) schedules
// many jobs of few kinds, and one read a second per kind is enough. A
// declaration that changes a kind's defaults reaches such a producer's
// jobs within this time.
const kindDefaultsTTL = time.Second

// kindDefaultsCache holds the kind defaults a Scheduler read, each with
// when (host clock: only the entry's age matters), including that a kind
// had none.
type kindDefaultsCache struct {
	mu      sync.Mutex
	entries map[string]kindDefaultsEntry
}

type kindDefaultsEntry struct {
	defaults store.KindDefaults
	found    bool
	readAt   time.Time
}

// get returns the stored defaults of kinds (those that have some), read
// from st for the kinds whose entry is missing or older than
// kindDefaultsTTL, in one call.
func (c *kindDefaultsCache) get(ctx context.Context, st store.Store, now time.Time, kinds []string) (map[string]store.KindDefaults, error) {
	kd, ok := st.(store.KindDefaulter)
	if !ok {
		return nil, nil
	}
	out := make(map[string]store.KindDefaults, len(kinds))
	var stale []string
	c.mu.Lock()
	for _, k := range kinds {
		e, ok := c.entries[k]
		switch {
		case !ok || now.Sub(e.readAt) >= kindDefaultsTTL || now.Before(e.readAt):
			stale = append(stale, k)
		case e.found:
			out[k] = e.defaults
		}
	}
	c.mu.Unlock()
	if len(stale) == 0 {
		return out, nil
	}
	slices.Sort(stale)
	stale = slices.Compact(stale)
	got, err := kd.KindDefaults(ctx, stale)
	if err != nil {
		return nil, fmt.Errorf("read kind defaults: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]kindDefaultsEntry{}
	}
	for _, k := range stale {
		c.entries[k] = kindDefaultsEntry{readAt: now}
	}
	for _, d := range got {
		c.entries[d.Kind] = kindDefaultsEntry{defaults: d, found: true, readAt: now}
		out[d.Kind] = d
	}
	return out, nil
}

// forget drops what the cache holds of kinds, so that this host's own
// declaration applies to its next Schedule at once.
func (c *kindDefaultsCache) forget(kinds ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range kinds {
		delete(c.entries, k)
	}
}
