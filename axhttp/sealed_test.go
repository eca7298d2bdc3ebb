package axhttp

import (
	"context"
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
