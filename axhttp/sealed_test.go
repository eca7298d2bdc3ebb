package axhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
)

// TestJobPageEncrypted: a server without the key ring shows a sealed
// payload and secret metadata as "encrypted (key ID)", never the value.
func TestJobPageEncrypted(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	k, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(k)
	require.NoError(t, err)
	producer, err := ax.New(ax.Config{Store: f.st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Stop(context.Background()) })
	res, err := producer.Schedule(context.Background(), "mail", map[string]string{"to": "ada@example.com"},
		ax.SecretMetadata(map[string]string{"token": "hunter2"}), ax.Metadata(map[string]string{"tenant": "acme"}))
	require.NoError(t, err)

	b := f.browser()
	b.login("dash", readerSecret)
	resp, page := b.get("/jobs/" + res.ID.String())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "encrypted (key k1)")
	require.Contains(t, page, "acme")
	require.NotContains(t, page, "ada@example.com")
	require.NotContains(t, page, "hunter2")
}

// TestJobPageLookalikeShown: a plain payload and metadata value that
// merely look like sealed values (an "ax_sealed" member, a key) are shown
// as they are, not as "encrypted", which hid their content.
func TestJobPageLookalikeShown(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	producer, err := ax.New(ax.Config{Store: f.st, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Stop(context.Background()) })
	lookalike := `{"ax_sealed":1,"key":"k1","note":"shipping to Lisbon"}`
	res, err := producer.Schedule(context.Background(), "mail", json.RawMessage(lookalike),
		ax.Metadata(map[string]string{"tag": `{"ax_sealed":2,"key":"k1","label":"gold customer"}`}))
	require.NoError(t, err)

	b := f.browser()
	b.login("dash", readerSecret)
	resp, page := b.get("/jobs/" + res.ID.String())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, page, "encrypted (key")
	require.Contains(t, page, "shipping to Lisbon")
	require.Contains(t, page, "gold customer")
}

// TestReadOnlySecretMetadata: on a server with the key ring, a read-only
// key sees the payload opened but the values given with SecretMetadata
// sealed, in the JSON API, the listing and the job page; a key that may
// change jobs sees them plain. Read-only keys used to read the secrets in
// the clear.
func TestReadOnlySecretMetadata(t *testing.T) {
	k, err := ax.GenerateKey("k1")
	require.NoError(t, err)
	ring, err := ax.NewKeyRing(k)
	require.NoError(t, err)
	f := newFixture(t, fixtureOptions{schedCfg: func(c *ax.Config) { c.Keys = ring }})
	res, err := f.s.Schedule(context.Background(), "mail", map[string]string{"to": "ada@example.com"},
		ax.SecretMetadata(map[string]string{"token": "hunter2"}), ax.Metadata(map[string]string{"tenant": "acme"}))
	require.NoError(t, err)

	for _, path := range []string{"/api/v1/jobs/" + res.ID.String(), "/api/v1/jobs?kind=mail"} {
		resp, body := f.call(&f.reader, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), "ada@example.com", "%s: the payload opens for readers", path)
		require.Contains(t, string(body), "acme", path)
		require.NotContains(t, string(body), "hunter2", "%s: a read-only key read secret metadata", path)
		require.Contains(t, string(body), `ax_sealed`, path)

		resp, body = f.call(&f.app, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), "hunter2", "%s: a key that may change jobs reads it", path)
	}
	b := f.browser()
	b.login("dash", readerSecret)
	resp, page := b.get("/jobs/" + res.ID.String())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "encrypted (key k1)")
	require.Contains(t, page, "ada@example.com")
	require.NotContains(t, page, "hunter2")
}
