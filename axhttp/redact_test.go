package axhttp

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// callbackAddrErr is a delivery's error as the Go resolver and the
// dial-time address check word them: the resolver's address and the
// private address a name resolved to.
const callbackAddrErr = `deliver callback: Post "https://hooks.example/x": dial tcp: lookup hooks.example on 10.96.0.10:53: no such host; ` +
	`axhttp: callback URL not allowed: fd00:ab::7 is not a public address; dial tcp [fd00:ab::8]:443 at 12:04:05`

// leasedJob claims a job of kind and returns it running with its lease
// token.
func leasedJob(t *testing.T, st store.Store, kind string) *store.JobRecord {
	t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: kind, Payload: []byte(`{}`), Priority: 2, MaxAttempts: 3}})
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	return res.Jobs[0]
}

// deadCallback makes a parent job die, which inserts its callback
// delivery, and lets the delivery die with callbackAddrErr; it returns
// the parent's and the delivery's IDs.
func deadCallback(t *testing.T, st store.Store) (parent, delivery uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	parent = uuid.Must(uuid.NewV7())
	_, err := st.Insert(ctx, []store.InsertParams{{ID: parent, Kind: "report", Payload: []byte(`{}`), Priority: 2, MaxAttempts: 1,
		FollowUps: []store.FollowUp{{On: []store.State{ax.StateDead}, Job: store.InsertParams{Kind: CallbackKind,
			Payload: []byte(`{"url":"https://hooks.example/x"}`), Priority: 2, MaxAttempts: 1}}}}})
	require.NoError(t, err)
	for _, step := range [][2]string{{"report", "report failed"}, {CallbackKind, callbackAddrErr}} {
		kind, msg := step[0], step[1]
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: kind, Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1, kind)
		_, err = st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: res.Jobs[0].ID, Token: res.Jobs[0].LeaseToken},
			Outcome: store.OutcomeDead, Error: msg}})
		require.NoError(t, err)
		if kind == CallbackKind {
			delivery = res.Jobs[0].ID
		}
	}
	return parent, delivery
}

// TestReadOnlyRedaction: a read-only key sees no lease token and no
// network address in a callback delivery's errors, through the API and
// on every dashboard page that shows the job; a key that may change jobs
// sees both (issue 25 defect 6).
func TestReadOnlyRedaction(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	running := leasedJob(t, f.st, "email")
	token := running.LeaseToken.String()
	parent, delivery := deadCallback(t, f.st)
	secrets := []string{token, "10.96.0.10", "fd00:ab::7", "fd00:ab::8"}

	reader := f.browser()
	reader.login("dash", readerSecret)
	admin := f.browser()
	admin.login("app", testSecret)
	views := []struct {
		name string
		read func(readOnly bool) string
	}{
		{"API job", func(ro bool) string { return f.apiGet(ro, APIPrefix+"/jobs/"+running.ID.String()) }},
		{"API list", func(ro bool) string { return f.apiGet(ro, APIPrefix+"/jobs?limit=100") }},
		{"API delivery", func(ro bool) string { return f.apiGet(ro, APIPrefix+"/jobs/"+delivery.String()) }},
		{"API follow-ups", func(ro bool) string { return f.apiGet(ro, APIPrefix+"/jobs/"+parent.String()+"/followups") }},
		{"job page", func(ro bool) string { return pick(ro, reader, admin).page("/jobs/" + delivery.String()) }},
		{"parent's page", func(ro bool) string { return pick(ro, reader, admin).page("/jobs/" + parent.String()) }},
		{"job list", func(ro bool) string { return pick(ro, reader, admin).page("/jobs?kind=" + CallbackKind) }},
		{"dead letters", func(ro bool) string { return pick(ro, reader, admin).page("/dead?kind=" + CallbackKind) }},
		{"raw errors", func(ro bool) string {
			return pick(ro, reader, admin).page("/jobs/" + delivery.String() + "/raw/errors")
		}},
	}
	seen := map[string]bool{}
	for _, v := range views {
		t.Run(v.name, func(t *testing.T) {
			body := v.read(true)
			for _, s := range secrets {
				require.NotContains(t, body, s)
			}
			for _, s := range secrets {
				seen[s] = seen[s] || contains(v.read(false), s)
			}
		})
	}
	for _, s := range secrets {
		require.True(t, seen[s], "a read-write key never sees %s", s)
	}
	require.Contains(t, f.apiGet(true, APIPrefix+"/jobs/"+delivery.String()), "12:04:05", "a time of day is not an address")
}

func TestHideAddrs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"lookup x on 10.96.0.10:53: no such host", "lookup x on [address hidden]: no such host"},
		{"dial tcp 192.168.1.2:443: connect: refused", "dial tcp [address hidden]: connect: refused"},
		{"dial tcp [fd00::1]:443: i/o timeout", "dial tcp [address hidden]: i/o timeout"},
		{"fd00:ab::7 is not a public address", "[address hidden] is not a public address"},
		{"::ffff:10.0.0.1 refused", "[address hidden] refused"},
		{"at 12:04:05 the receiver answered 503", "at 12:04:05 the receiver answered 503"},
		{"version 1.2.3 of the receiver", "version 1.2.3 of the receiver"},
	} {
		require.Equal(t, c.want, hideAddrs(c.in), c.in)
	}
}

func pick(readOnly bool, reader, admin *browser) *browser {
	if readOnly {
		return reader
	}
	return admin
}

// page reads a dashboard page (200 required).
func (b *browser) page(path string) string {
	b.f.t.Helper()
	res, body := b.get(path)
	require.Equal(b.f.t, http.StatusOK, res.StatusCode, body)
	return body
}

// apiGet reads an API path with the read-only key or the read-write one
// (200 required).
func (f *fixture) apiGet(readOnly bool, path string) string {
	f.t.Helper()
	s := &f.app
	if readOnly {
		s = &f.reader
	}
	res, body := f.call(s, "GET", path, "")
	require.Equal(f.t, http.StatusOK, res.StatusCode, string(body))
	return string(body)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestBriefCallbackErrorCutAddress: a listing cuts errors (in brief), and
// an address at the cut is cut too; a read-only caller sees no part of
// it. (With the cut at ListPreviewBytes, "fd00:ab" would otherwise be
// shown: hideAddrs recognizes whole addresses only.)
func TestBriefCallbackErrorCutAddress(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	deadJob(t, f.st, CallbackKind, strings.Repeat("x", ListPreviewBytes-len("dial tcp [fd00:ab"))+"dial tcp [fd00:abcd::1]:443: refused")
	res, body := f.call(&f.reader, http.MethodGet, APIPrefix+"/jobs?kind="+CallbackKind, "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	require.Contains(t, string(body), "dial tcp "+hiddenAddr)
	require.NotContains(t, string(body), "fd00")
}
