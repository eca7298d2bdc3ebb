package axhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHSTSOverTLS: every answer over a TLS connection the handler's
// server terminates (ax serve --tls-cert), API or dashboard, refused or
// not, carries Strict-Transport-Security; answers over plain HTTP do
// not. (Issue 41: none did.)
func TestHSTSOverTLS(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, path := range []string{"/login", "/", APIPrefix + "/jobs", "/static/style.css"} {
		for _, scheme := range []string{"https", "http"} {
			req := httptest.NewRequest(http.MethodGet, scheme+"://ax.example"+path, nil)
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			want := ""
			if scheme == "https" {
				want = hstsValue
			}
			require.Equal(t, want, rec.Header().Get("Strict-Transport-Security"), "%s %s (status %d)", scheme, path, rec.Code)
		}
	}
}
