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
