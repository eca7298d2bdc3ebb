package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerTimeouts: the example's server bounds every phase of a
// connection (people copy it; issue 25 defect 6).
func TestServerTimeouts(t *testing.T) {
	srv := newServer("127.0.0.1:0", http.NotFoundHandler())
	for name, d := range map[string]any{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout,
		"ReadTimeout":       srv.ReadTimeout,
		"WriteTimeout":      srv.WriteTimeout,
		"IdleTimeout":       srv.IdleTimeout,
		"MaxHeaderBytes":    srv.MaxHeaderBytes,
	} {
		require.Positive(t, d, name)
	}
}
