package sqlitestore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
)

// Subscribe calls fn for each notification until unsubscribe is called.
// Notifications are in-process: the Store notifies its own subscribers,
// once per call and kind with the earliest run_at, after the call's
// transaction committed, when Insert, InsertBatch, FirePeriodic or a
// job's end inserts jobs, when Control or Bulk makes jobs due (resume,
// run-now), when Finish makes a job retrying or scheduled again (retry,
// snooze, release) and when RescueExpired makes jobs retrying; a resumed
// kind sends an empty-kind notification. InsertTx notifies as soon as it
// inserted (see InsertTx).
//
// fn runs on the goroutine of the store call that caused the notification.
// Calls to one fn are serialized, so fn need not be safe for concurrent
// use, but for the same reason fn must not call the Store and must not
// block: hand the notification to another goroutine instead (a
// non-blocking channel send). Unsubscribe is safe to call more than once
// and waits until fn is no longer running, so it must not be called from
// inside fn. On a closed store, or with a nil fn, Subscribe does nothing.
func (s *Store) Subscribe(fn func(store.Notification)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	s.closeMu.Lock()
	closed := s.closed.Load()
	sub := &subscriber{fn: fn}
	if !closed {
		s.subs.add(sub)
	}
	s.closeMu.Unlock()
	if closed {
		return func() {}
	}
	return func() {
		s.subs.remove(sub)
		sub.mu.Lock() // waits for a running fn
		sub.done = true
		sub.mu.Unlock()
	}
}

type subscriber struct {
	fn   func(store.Notification)
	mu   sync.Mutex // held while fn runs
	done bool       // set by unsubscribe; fn is not called after
}

// subscribers is a copy-on-write list, read without locks when delivering.
type subscribers struct {
	mu   sync.Mutex
	list atomic.Pointer[[]*subscriber]
}

func (ss *subscribers) add(sub *subscriber) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var l []*subscriber
	if p := ss.list.Load(); p != nil {
		l = append(l, *p...)
	}
	l = append(l, sub)
	ss.list.Store(&l)
}

func (ss *subscribers) remove(sub *subscriber) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p := ss.list.Load()
	if p == nil {
		return
	}
	l := make([]*subscriber, 0, len(*p))
	for _, x := range *p {
		if x != sub {
			l = append(l, x)
		}
	}
	ss.list.Store(&l)
}

func (ss *subscribers) clear() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.list.Store(nil)
}

// any reports whether anyone listens, so that calls build notifications
// only when they will be delivered.
func (ss *subscribers) any() bool {
	p := ss.list.Load()
	return p != nil && len(*p) > 0
}

// deliver calls every subscriber with notes.
func (ss *subscribers) deliver(notes []store.Notification) {
	if len(notes) == 0 {
		return
	}
	p := ss.list.Load()
	if p == nil {
		return
	}
	for _, sub := range *p {
		sub.call(notes)
	}
}

func (sub *subscriber) call(notes []store.Notification) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.done {
		return
	}
	for _, n := range notes {
		sub.fn(n)
	}
}

// notes collects the notifications of one call: one per kind, with the
// earliest run_at. An empty kind asks listeners to re-check.
type notes struct {
	list  []store.Notification
	byKey map[string]int // index into list, once list grows
}

func (ns *notes) add(kind string, runAt time.Time) {
	i, ok := ns.find(kind)
	if !ok {
		ns.list = append(ns.list, store.Notification{Kind: kind, RunAt: runAt})
		if ns.byKey != nil {
			ns.byKey[kind] = len(ns.list) - 1
		}
		return
	}
	if runAt.Before(ns.list[i].RunAt) {
		ns.list[i].RunAt = runAt
	}
}

func (ns *notes) find(kind string) (int, bool) {
	if ns.byKey != nil {
		i, ok := ns.byKey[kind]
		return i, ok
	}
	for i := range ns.list {
		if ns.list[i].Kind == kind {
			return i, true
		}
	}
	if len(ns.list) >= 8 {
		ns.byKey = make(map[string]int, 2*len(ns.list))
		for i := range ns.list {
			ns.byKey[ns.list[i].Kind] = i
		}
	}
	return 0, false
}
