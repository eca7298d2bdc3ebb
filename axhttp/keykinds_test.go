package axhttp

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestKeyKinds: a key with Kinds schedules only jobs of those kinds (a
// kind, or a prefix ending in "*"): another kind, alone or in a batch, is
// refused with 403 and nothing is stored, so a client's key cannot fill
// the overview with kinds. Keys without Kinds schedule any kind. (Issue
// 41: one write key created 20,000 kinds in 20 requests.)
func TestKeyKinds(t *testing.T) {
	scoped := Signer{KeyID: "scoped", Secret: otherSecret}
	f := newFixture(t, fixtureOptions{cfg: func(c *Config) {
		nonces, _ := NoncesFor(c.Scheduler.Store())
		auth, err := NewAuth(AuthConfig{Nonces: nonces, Keys: []Key{
			{ID: "app", Secret: testSecret},
			{ID: "scoped", Secret: otherSecret, Kinds: []string{"email.*", "report"}},
		}})
		require.NoError(t, err)
		c.Auth = auth
	}})
	count := func() int64 {
		n, err := f.s.Admin().Count(t.Context(), store.JobFilter{})
		require.NoError(t, err)
		return n
	}
	for _, c := range []struct {
		signer *Signer
		path   string
		body   string
		want   int
	}{
		{&scoped, "/jobs", `{"kind":"email.send"}`, http.StatusCreated},
		{&scoped, "/jobs", `{"kind":"report"}`, http.StatusCreated},
		{&scoped, "/jobs", `{"kind":"reports"}`, http.StatusForbidden},
		{&scoped, "/jobs", `{"kind":"emailx"}`, http.StatusForbidden},
		{&scoped, "/jobs/batch", `{"jobs":[{"kind":"email.a"},{"kind":"spam.1"}]}`, http.StatusForbidden},
		{&f.app, "/jobs", `{"kind":"anything"}`, http.StatusCreated},
	} {
		before := count()
		res, body := f.call(c.signer, http.MethodPost, APIPrefix+c.path, c.body)
		require.Equal(t, c.want, res.StatusCode, "%s %s: %s", c.signer.KeyID, c.body, body)
		if c.want == http.StatusForbidden {
			require.Equal(t, before, count(), "a refused request stored a job")
		}
	}
	_, err := NewAuth(AuthConfig{Nonces: NewMemoryNonces(10), Keys: []Key{{ID: "k", Secret: testSecret, Kinds: []string{""}}}})
	require.ErrorIs(t, err, ErrInvalidAuthConfig)
}
