package pgstore

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// notification is the JSON payload of the Store's NOTIFY messages.
type notification struct {
	Kind  string    `json:"kind"`
	RunAt time.Time `json:"run_at"`
}

// Listener reconnection backoff, and how long Subscribe waits for the
// first LISTEN.
const (
	readyTimeout     = 5 * time.Second
	minListenBackoff = 50 * time.Millisecond
	maxListenBackoff = 5 * time.Second
)

// listenerProbe is how the listener finds out that its connection is
// gone when nothing says so: a connection whose peer vanished without a
// FIN or RST (a host or NAT that dropped it, a failover that moved the
// address) stays open for the kernel's TCP timeouts, minutes or hours,
// delivering nothing, while claim cursors stay on and skip what its lost
// notifications would have lowered them to. After every quiet interval
// the listener sends a query on the connection and gives it timeout to
// answer; one that does not is closed, which turns the cursors off and
// reconnects (a new LISTEN, then the subscribers' re-check). A connect or
// LISTEN that hangs is bounded the same way. So a dead connection costs
// at most interval + timeout of notifications.
type listenerProbe struct {
	interval, timeout time.Duration
}

// defaultListenerProbe: quiet for 10 s, then 5 s to answer.
var defaultListenerProbe = listenerProbe{interval: 10 * time.Second, timeout: 5 * time.Second}

// Subscribe calls fn for every notification on the Store's channel (jobs
// inserted, resumed, run now, retried, snoozed, handed back or rescued),
// until unsubscribe is called. The first subscriber starts one goroutine
// holding one dedicated connection (outside the pool, or to the
// WithListenerConnString server) that LISTENs and, on any error, reconnects
// with exponential backoff (50ms doubling to 5s); notifications sent while
// it is disconnected are lost, so callers also poll. A connection quiet for
// 10s must answer a query within 5s, or it is closed and replaced
// (listenerProbe). The last unsubscribe
// stops it and waits for it to exit. Subscribe returns once the listener
// is listening, or after its first failed attempt to connect, or after 5s.
//
// fn must not block, and must not call unsubscribe. Unsubscribe is safe to
// call more than once; once it returns, fn is not running and will not be
// called again. After Close, and with WithTransactionPooler but no
// WithListenerConnString (polling only), Subscribe returns a no-op
// unsubscribe.
func (s *Store) Subscribe(fn func(store.Notification)) (unsubscribe func()) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closed.Load() || fn == nil || s.pollingOnly() {
		return func() {}
	}
	if s.listener == nil {
		s.listener = s.startListener()
	}
	l := s.listener
	id := l.add(fn)
	// Return once LISTEN is in place, so that what the caller does next
	// is heard, unless the connection is slow or failing.
	t := time.NewTimer(readyTimeout)
	select {
	case <-l.ready:
	case <-t.C:
	}
	t.Stop()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.lmu.Lock()
			defer s.lmu.Unlock()
			if l.remove(id) == 0 && s.listener == l {
				s.listener = nil
				l.stop()
			}
		})
	}
}

// listener is one LISTEN goroutine and its subscribers.
type listener struct {
	mu     sync.RWMutex // held for reading while calling subscribers
	subs   map[int]func(store.Notification)
	nextID int

	ready     chan struct{} // closed after the first LISTEN attempt
	readyOnce sync.Once

	cancel context.CancelFunc
	done   chan struct{}
}

func (l *listener) setReady() { l.readyOnce.Do(func() { close(l.ready) }) }

func (s *Store) startListener() *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{subs: map[int]func(store.Notification){}, cancel: cancel,
		ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer l.setReady()
		s.listen(ctx, l)
	}()
	return l
}

func (l *listener) add(fn func(store.Notification)) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	l.subs[l.nextID] = fn
	return l.nextID
}

// remove drops a subscriber and returns how many remain. When it returns,
// the subscriber is not running.
func (l *listener) remove(id int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs, id)
	return len(l.subs)
}

// stop ends the goroutine and waits for it. Safe to call more than once.
func (l *listener) stop() {
	l.cancel()
	<-l.done
}

func (l *listener) deliver(n store.Notification) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, fn := range l.subs {
		fn(n)
	}
}

// listen connects, LISTENs and delivers until ctx is cancelled,
// reconnecting with backoff.
func (s *Store) listen(ctx context.Context, l *listener) {
	backoff := minListenBackoff
	for resumed := false; ctx.Err() == nil; resumed = true {
		delivered, _ := s.listenOnce(ctx, l, resumed)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			backoff = minListenBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxListenBackoff)
	}
}

// listenOnce runs one connection until it fails; delivered reports whether
// it got as far as listening. When resumed (a reconnect), it tells
// subscribers that notifications may have been missed while it was away.
func (s *Store) listenOnce(ctx context.Context, l *listener, resumed bool) (listening bool, err error) {
	probe := s.listenerProbe
	var conn *pgx.Conn
	cctx, cancel := context.WithTimeout(ctx, probe.interval+probe.timeout)
	if s.opts.listenerDSN != "" {
		conn, err = pgx.Connect(cctx, s.opts.listenerDSN)
	} else {
		conn, err = pgx.ConnectConfig(cctx, s.pool.Config().ConnConfig.Copy())
	}
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	}
	cancel()
	if conn != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}()
	}
	if err != nil {
		l.setReady()
		return false, err
	}
	// Claim cursors hold only while notifications are heard (cursor.go),
	// from before Subscribe returns.
	s.cursors.listening(true)
	defer s.cursors.listening(false)
	l.setReady()
	if resumed {
		l.deliver(store.Notification{}) // "re-check": anything may have been missed
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, probe.interval)
		pn, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil && !conn.IsClosed() {
			// Quiet for an interval: the connection must answer.
			pctx, cancel := context.WithTimeout(ctx, probe.timeout)
			_, err = conn.Exec(pctx, "SELECT 1")
			cancel()
			if err == nil {
				continue
			}
		}
		if err != nil {
			return true, err
		}
		var n notification
		if json.Unmarshal([]byte(pn.Payload), &n) != nil {
			s.cursors.reset() // what it made claimable is unknown
			continue
		}
		if n.Kind == "" {
			// A kind resumed (SetKindPaused): hosts re-check.
			s.cursors.reset()
			l.deliver(store.Notification{})
			continue
		}
		s.cursors.lower(n.Kind, n.RunAt)
		l.deliver(store.Notification{Kind: n.Kind, RunAt: n.RunAt})
	}
}
