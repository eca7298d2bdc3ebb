package axhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// nested is a JSON array nested n deep: 2n bytes.
func nested(n int) []byte {
	return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
}

// maxIndent returns the most leading spaces of a line of s.
func maxIndent(s string) int {
	most := 0
	for _, line := range strings.Split(s, "\n") {
		most = max(most, len(line)-len(strings.TrimLeft(line, " ")))
	}
	return most
}

// TestBoundedJSON: whatever the value, the text shown is at most the
// byte bound, indented at most the depth bound, valid UTF-8, and, when
// not cut, the same JSON as the value.
func TestBoundedJSON(t *testing.T) {
	obj := func(depth int) []byte { // {"a":{"a":...{"a":1}...}}
		return []byte(strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth))
	}
	cases := []struct {
		name string
		raw  []byte
		cut  bool
	}{
		{"empty object and array", []byte(`{"a":{},"b":[ ],"c":[1,2]}`), false},
		{"escapes in strings", []byte(`{"q":"a\"b\\","br":"{[,:]}"}`), false},
		{"shallow", obj(pageValueDepth), false},
		{"deeper than indented", obj(pageValueDepth + 10), false},
		{"9,000 deep, 18 KB", nested(9000), true},
		{"wide", []byte("[" + strings.Repeat(`"xxxxxxxx",`, 4000) + `"x"]`), true},
		{"multibyte at the cut", []byte(`"` + strings.Repeat("é", pageValueBytes) + `"`), true},
		{"not JSON", []byte("plain text"), false},
		{"not JSON, long", bytes.Repeat([]byte("x"), 3*pageValueBytes), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := boundedJSON(c.raw, pageValueBytes, pageValueDepth)
			require.Equal(t, c.cut, s.Cut)
			require.LessOrEqual(t, len(s.Text), pageValueBytes)
			require.LessOrEqual(t, maxIndent(s.Text), 2*pageValueDepth)
			require.True(t, utf8.ValidString(s.Text))
			if !c.cut && json.Valid(c.raw) {
				var want, got bytes.Buffer
				require.NoError(t, json.Compact(&want, c.raw))
				require.NoError(t, json.Compact(&got, []byte(s.Text)), s.Text)
				require.Equal(t, want.String(), got.String())
			}
		})
	}
	// Up to the depth bound the text is json.Indent's.
	raw := []byte(`{"a":[1,{"b":null,"c":"d"}],"e":{},"f":[]}`)
	var want bytes.Buffer
	require.NoError(t, json.Indent(&want, raw, "", "  "))
	require.Equal(t, want.String(), boundedJSON(raw, pageValueBytes, pageValueDepth).Text)
}

// hostileJob stores, as a Go program may (the API refuses such
// payloads), a job whose every value is as large as the store takes:
// payload and result nested 9,000 deep, 64 KB of metadata, and 12 failed
// attempts with 32 KB errors. It returns the job's ID.
func hostileJob(t *testing.T, st store.Store) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	md := map[string]string{}
	for i := range 60 {
		md[fmt.Sprintf("k%02d", i)] = strings.Repeat("<v>", 340)
	}
	_, err := st.Insert(ctx, []store.InsertParams{{ID: id, Kind: "hostile", Payload: nested(9000), Priority: 2, MaxAttempts: 20, Metadata: md}})
	require.NoError(t, err)
	claim := func() uuid.UUID {
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "n", Kinds: []store.KindLimit{{Kind: "hostile", Limit: 1}}, Limit: 1, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		return res.Jobs[0].LeaseToken
	}
	for i := range 12 {
		msg := fmt.Sprintf("attempt %d: <b>boom</b>\n", i+1) + strings.Repeat("at frame()\n", store.MaxErrorLength/11-10)
		_, err := st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: id, Token: claim()}, Outcome: store.OutcomeRetry, Error: msg}})
		require.NoError(t, err)
	}
	_, err = st.Finish(ctx, []store.FinishParams{{Lease: store.Lease{ID: id, Token: claim()}, Outcome: store.OutcomeSucceeded, Result: nested(9000)}})
	require.NoError(t, err)
	return id
}

// TestJobPageHostileJob: the page of a job whose values are as hostile
// as the store takes is under 512 KB of HTML, says what it cut and links
// each cut value raw; the raw values are the stored bytes, served as
// JSON that no browser runs (issue 25 defect 1: a 9,000-deep payload made
// a 162 MB page).
func TestJobPageHostileJob(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	id := hostileJob(t, f.st)
	rec, err := f.s.Admin().Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, store.StateSucceeded, rec.State)
	require.Len(t, rec.Errors, 12)
	if len(rec.Result) == 0 {
		t.Fatalf("the store kept no result")
	}

	b := f.browser()
	b.login("dash", readerSecret) // read-only keys open job pages too
	start := time.Now()
	res, page := b.get("/jobs/" + id.String())
	took := time.Since(start) // logged, never asserted: the machine is shared
	require.Equal(t, http.StatusOK, res.StatusCode)
	t.Logf("job page: %d bytes of HTML in %s", len(page), took)
	require.Less(t, len(page), 512<<10, "the page is not bounded")
	require.LessOrEqual(t, maxIndent(page), 2*pageValueDepth+8)
	require.NotContains(t, page, "<b>boom</b>")
	for _, part := range []string{"payload", "result", "errors"} {
		require.Contains(t, page, fmt.Sprintf(`href="/ax/jobs/%s/raw/%s"`, id, part), part)
	}
	require.Contains(t, page, `id="payload-cut"`)
	require.Contains(t, page, `id="result-cut"`)
	require.Contains(t, page, `id="attempts-cut"`)
	require.Contains(t, page, `id="metadata-cut"`)
	require.Contains(t, page, "2 earlier failed attempt(s) not shown")

	for _, c := range []struct {
		part string
		want []byte
	}{
		{"payload", rec.Payload},
		{"result", rec.Result},
		{"metadata", must(json.Marshal(rec.Metadata))},
		{"errors", must(json.Marshal(rec.Errors))},
	} {
		t.Run("raw "+c.part, func(t *testing.T) {
			res, body := b.get("/jobs/" + id.String() + "/raw/" + c.part)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Equal(t, "application/json", res.Header.Get("Content-Type"))
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
			require.Contains(t, res.Header.Get("Content-Security-Policy"), "sandbox")
			require.Equal(t, string(c.want), body, "not the stored bytes")
		})
	}
	for _, p := range []string{"/raw/nope", "/raw/", "/raw/../payload"} {
		res, _ := b.get("/jobs/" + id.String() + p)
		require.NotEqual(t, http.StatusOK, res.StatusCode, p)
	}
	res, _ = b.get("/jobs/" + uuid.NewString() + "/raw/payload")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	anon, _ := f.browser().get("/jobs/" + id.String() + "/raw/payload")
	require.NotEqual(t, http.StatusOK, anon.StatusCode, "a raw value without a session")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
