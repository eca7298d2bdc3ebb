package pgstore_test

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// blackHole is a TCP proxy to a server that can be made to swallow
// everything, as a connection whose peer vanished without a FIN or RST
// does: writes succeed, nothing comes back, nothing is closed. A
// connection that was open when the hole opened stays swallowed; new ones
// pass once it is closed again.
type blackHole struct {
	ln     net.Listener
	target string
	open   atomic.Bool

	mu    sync.Mutex
	conns []*holeConn
	wg    sync.WaitGroup
}

type holeConn struct {
	client, server net.Conn
	swallowed      atomic.Bool
}

func newBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &blackHole{ln: ln, target: target}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(h.close)
	return h
}

func (h *blackHole) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		srv, err := net.Dial("tcp", h.target)
		if err != nil {
			c.Close()
			continue
		}
		hc := &holeConn{client: c, server: srv}
		hc.swallowed.Store(h.open.Load())
		h.mu.Lock()
		h.conns = append(h.conns, hc)
		h.mu.Unlock()
		h.wg.Add(2)
		go h.pipe(hc, c, srv)
		go h.pipe(hc, srv, c)
	}
}

// pipe copies from src to dst until src fails, dropping what it reads
// while the connection is swallowed.
func (h *blackHole) pipe(hc *holeConn, src, dst net.Conn) {
	defer h.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !hc.swallowed.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// swallow opens the hole: every open connection, and every new one until
// release, swallows everything.
func (h *blackHole) swallow() {
	h.open.Store(true)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.swallowed.Store(true)
	}
}

// release lets new connections through again.
func (h *blackHole) release() { h.open.Store(false) }

func (h *blackHole) close() {
	h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.client.Close()
		c.server.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// TestListenerNoticesADeadConnection: a listener connection that stops
// answering without being closed (its notifications swallowed) is found
// out by the listener's probe: the claim cursors turn off (claims scan
// whole ranges, losing nothing the lost notifications would have lowered
// them to), and once the server answers again the listener reconnects,
// turns them on and tells its subscribers to re-check. Before the probe
// the cursors stayed on for as long as the kernel kept the connection.
func TestListenerNoticesADeadConnection(t *testing.T) {
	dsn := pgtest.DSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	hole := newBlackHole(t, u.Host)
	u.Host = hole.ln.Addr().String()
	pool := pgtest.PoolFor(t, dsn)
	s, err := pgstore.New(ctxT(t), pool, pgstore.WithListenerConnString(u.String()))
	require.NoError(t, err)
	defer s.Close()
	s.SetListenerProbe(100*time.Millisecond, 200*time.Millisecond)

	heard := make(chan store.Notification, 100)
	unsubscribe := s.Subscribe(func(n store.Notification) {
		select {
		case heard <- n:
		default:
		}
	})
	defer unsubscribe()
	require.True(t, s.CursorsOn(), "listening")
	_, err = s.Insert(ctxT(t), []store.InsertParams{job("probe")})
	require.NoError(t, err)
	waitHeard(t, heard, "probe")

	hole.swallow()
	require.Eventually(t, func() bool { return !s.CursorsOn() }, 20*time.Second, 10*time.Millisecond,
		"the cursors must turn off once the listener connection stops answering")

	hole.release()
	require.Eventually(t, s.CursorsOn, 20*time.Second, 10*time.Millisecond, "the listener must come back")
	waitHeard(t, heard, "") // the re-check after a reconnect
	_, err = s.Insert(ctxT(t), []store.InsertParams{job("after")})
	require.NoError(t, err)
	waitHeard(t, heard, "after")
}

// waitHeard waits for a notification of kind ("" for a re-check).
func waitHeard(t *testing.T, heard <-chan store.Notification, kind string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case n := <-heard:
			if n.Kind == kind {
				return
			}
		case <-timeout:
			t.Fatalf("no notification of kind %q", kind)
		}
	}
}
