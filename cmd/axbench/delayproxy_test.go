package main

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// echoServer accepts one connection on 127.0.0.1 and echoes it back; it
// records when each 16-byte message (sequence number, send time in Unix
// ns) arrived on the first connection through arrivals, closed when that
// connection ends.
func echoServer(t testing.TB) (addr string, arrivals <-chan [3]int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan [3]int64, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var msg [16]byte
		for {
			if _, err := io.ReadFull(c, msg[:]); err != nil {
				return
			}
			now := time.Now().UnixNano()
			out <- [3]int64{int64(binary.BigEndian.Uint64(msg[:8])), int64(binary.BigEndian.Uint64(msg[8:])), now}
			if _, err := c.Write(msg[:]); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String(), out
}

func dialProxy(t testing.TB, rtt time.Duration) (net.Conn, <-chan [3]int64) {
	t.Helper()
	target, arrivals := echoServer(t)
	p, err := startDelayProxy(target, rtt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, arrivals
}

func message(seq int, at time.Time) []byte {
	var msg [16]byte
	binary.BigEndian.PutUint64(msg[:8], uint64(seq))
	binary.BigEndian.PutUint64(msg[8:], uint64(at.UnixNano()))
	return msg[:]
}

// TestDelayProxyOrderAndDelay sends messages back to back through a 1 ms
// proxy: each reaches the server in order and no earlier than half the
// round trip after it was sent, and its echo comes back no earlier than
// the round trip. Only lower bounds are checked: a loaded machine makes
// the delay longer, never shorter.
func TestDelayProxyOrderAndDelay(t *testing.T) {
	const rtt = time.Millisecond
	c, arrivals := dialProxy(t, rtt)
	const n = 200
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		if _, err := c.Write(message(i, sent[i])); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(100 * time.Microsecond) // some messages in separate reads
		}
	}
	var back [16]byte
	for i := range n {
		if _, err := io.ReadFull(c, back[:]); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(sent[i]); got < rtt {
			t.Errorf("echo %d back after %v, want at least %v", i, got, rtt)
		}
		if seq := int(binary.BigEndian.Uint64(back[:8])); seq != i {
			t.Fatalf("echo %d: got message %d", i, seq)
		}
		a := <-arrivals
		if int(a[0]) != i {
			t.Fatalf("arrival %d: got message %d", i, a[0])
		}
		if oneWay := time.Duration(a[2] - a[1]); oneWay < rtt/2 {
			t.Errorf("message %d arrived after %v, want at least %v", i, oneWay, rtt/2)
		}
	}
}

func TestDelayProxyCloseEndsConnections(t *testing.T) {
	target, _ := echoServer(t)
	p, err := startDelayProxy(target, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(message(0, time.Now())); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c) // EOF, or a reset: the proxy closed with the message unread
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("connection still open 5 s after Close")
	}
}

func TestWithHostPort(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable", "postgres://u@127.0.0.1:40000/db?sslmode=disable"},
		{"host=127.0.0.1 port=5432 user=u", "host=127.0.0.1 port=5432 user=u host=127.0.0.1 port=40000"},
	} {
		got, err := withHostPort(tc.dsn, "127.0.0.1:40000")
		if err != nil || got != tc.want {
			t.Errorf("withHostPort(%q) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
	}
}

// BenchmarkDelayProxyRoundTrip prints the round trip of a 16-byte ping
// through a proxy adding 1 ms, one ping at a time, as the metrics
// rtt-p50-µs and rtt-p99-µs. Expect 1,000 µs + 20–100 µs (the loopback
// and the wake-up of the writers), more on a loaded machine:
//
//	go test -run '^$' -bench DelayProxy -benchtime 2000x ./cmd/axbench
func BenchmarkDelayProxyRoundTrip(b *testing.B) {
	c, arrivals := dialProxy(b, time.Millisecond)
	go func() {
		for range arrivals {
		}
	}()
	rtts := make([]time.Duration, 0, b.N)
	var back [16]byte
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := c.Write(message(i, start)); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, back[:]); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "rtt-p50-µs")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "rtt-p99-µs")
	b.ReportMetric(0, "ns/op")
}
