package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// delayProxy is a TCP proxy on 127.0.0.1 that puts distance between
// axbench and its PostgreSQL server (-rtt): every byte is forwarded half a
// round trip after it was read, in each direction, and in the order it was
// read. Each connection has two pumps, one per direction; each is a reader
// goroutine that stamps what it reads with its due time and a writer that
// waits for that time and writes. A round trip through the proxy therefore
// takes at least rtt on top of the loopback's own.
//
// Go's timers wake an idle program on a grid of about a millisecond, far
// too coarse for a 0.5 ms delay, so the writer waits with sleepUntil:
// nanosleep to shortly before the due time, then a spin that yields. On
// the 2-core development machine (load 4) a 500 µs wait overshot by
// 600 µs (p50) with time.Sleep, 87 µs with nanosleep alone and 27 µs with
// nanosleep and the spin.
//
// Not modelled: bandwidth (a pump holds at most pumpChunks reads in
// flight), loss, jitter, and the delay of the TCP handshake to the server
// (the dial is not delayed; pools keep their connections).
type delayProxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every pump
}

const (
	// pumpChunks is how many reads a direction holds in flight.
	pumpChunks = 4096
	// spinBefore is how long before a due time nanosleep returns and the
	// spin takes over: about the kernel's timer slack (50 µs) and the
	// thread's wake-up.
	spinBefore = 60 * time.Microsecond
)

// startDelayProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target (host:port), delaying each direction by rtt/2.
// Close stops it.
func startDelayProxy(target string, rtt time.Duration) (*delayProxy, error) {
	if rtt <= 0 {
		return nil, fmt.Errorf("delay proxy: rtt %v, want above 0", rtt)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay proxy: %w", err)
	}
	p := &delayProxy{ln: ln, target: target, oneWay: rtt / 2, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the pumps.
// Safe to call twice.
func (p *delayProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track records c so that Close can close it; false when the proxy is
// closed (c is closed then).
func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *delayProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			p.untrack(client)
			continue
		}
		if !p.track(server) {
			p.untrack(client)
			return
		}
		// When either direction ends, both connections close, which ends
		// the other.
		var once sync.Once
		end := func() {
			once.Do(func() {
				p.untrack(client)
				p.untrack(server)
			})
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); defer end(); p.pump(client, server) }()
		go func() { defer p.wg.Done(); defer end(); p.pump(server, client) }()
	}
}

// chunk is one read, due to be written at due.
type chunk struct {
	due time.Time
	b   []byte
}

// pump forwards src to dst, each read delayed by p.oneWay, in order. It
// returns when src ends or dst fails.
func (p *delayProxy) pump(src, dst net.Conn) {
	q := make(chan chunk, pumpChunks)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reader
		defer wg.Done()
		defer close(q)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(p.oneWay), b: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	for c := range q {
		sleepUntil(c.due)
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close() // ends the reader
			for range q {
			}
			return
		}
	}
}

// sleepUntil returns at t or shortly after (tens of microseconds, where
// time.Sleep may take a millisecond more): nanosleep until spinBefore
// ahead of t, then a spin that yields to other goroutines.
func sleepUntil(t time.Time) {
	if d := time.Until(t) - spinBefore; d > 0 {
		ts := syscall.NsecToTimespec(int64(d))
		for {
			err := syscall.Nanosleep(&ts, &ts)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// withHostPort returns dsn (a URL or keyword/value connection string) with
// its host and port replaced by addr's.
func withHostPort(dsn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", err
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " host=" + host + " port=" + port, nil // keyword/value: the last wins
	}
	u.Host = addr
	return u.String(), nil
}

// serverHostPort returns the single TCP host:port dsn connects to.
func serverHostPort(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	if len(cfg.Fallbacks) > 0 {
		return "", errors.New("-rtt: the server URL names several hosts; name one")
	}
	if len(cfg.Host) > 0 && cfg.Host[0] == '/' {
		return "", fmt.Errorf("-rtt: the server is reached through the Unix socket %s; give a TCP host", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), nil
}
