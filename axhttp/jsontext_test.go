package axhttp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckJSONText(t *testing.T) {
	cases := []struct {
		name string
		body string
		ok   bool
	}{
		{"plain", `{"kind":"email","metadata":{"k":"v"}}`, true},
		{"escapes", `{"a":"\n\"\\\u00e9\u20ac"}`, true},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, true},
		{"multibyte UTF-8", `{"a":"été 😀"}`, true},
		{"backslash before a quote-u", `{"a":"\\u12"}`, true},
		{"invalid byte", "{\"a\":\"\xff\"}", false},
		{"truncated UTF-8", "{\"a\":\"\xe2\x82\"}", false},
		{"overlong UTF-8", "{\"a\":\"\xc0\xaf\"}", false},
		{"invalid byte in a key", "{\"\xfe\":1}", false},
		{"lone low surrogate", `{"a":"\udc00"}`, false},
		{"lone high surrogate", `{"a":"\ud800"}`, false},
		{"high surrogate then text", `{"a":"\ud800xxxxxx"}`, false},
		{"high surrogate then another high", `{"a":"\ud800\ud800"}`, false},
		{"high surrogate at the end", `{"a":"\ud800`, false},
		{"upper-case hex", `{"a":"\uDC00"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkJSONText([]byte(c.body))
			require.Equal(t, c.ok, err == nil, "%v", err)
		})
	}
}

func TestJSONDepth(t *testing.T) {
	cases := []struct {
		body  string
		limit int
		want  int
	}{
		{`1`, 10, 0},
		{`"[[[{"`, 10, 0},
		{`{"a":[1,{"b":"]]]\"[["}]}`, 10, 3},
		{`[[],[[]],[]]`, 10, 3},
		{strings.Repeat("[", 9000) + strings.Repeat("]", 9000), 64, 65},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), 64, 64},
	}
	for _, c := range cases {
		require.Equal(t, c.want, jsonDepth([]byte(c.body), c.limit), "%.40s", c.body)
	}
}

// TestSubmitRefusesRewrittenText: a kind, metadata key or value, unique
// key or payload with bytes that are not UTF-8, or with a lone UTF-16
// surrogate escape, is refused with a 400 problem and nothing is stored
// (issue 25 defect 4: encoding/json rewrote them to U+FFFD, and the job
// was stored under a kind no handler serves).
func TestSubmitRefusesRewrittenText(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	fields := []struct {
		name string
		tmpl string // X marks the bad text
	}{
		{"kind", `{"kind":"emailX"}`},
		{"metadata key", `{"kind":"email","metadata":{"tenantX":"acme"}}`},
		{"metadata value", `{"kind":"email","metadata":{"tenant":"acmeX"}}`},
		{"unique key", `{"kind":"email","unique_key":"kX"}`},
		{"payload string", `{"kind":"email","payload":{"to":"aX"}}`},
		{"payload key", `{"kind":"email","payload":{"toX":"a"}}`},
		{"batch kind", `{"jobs":[{"kind":"email"},{"kind":"emailX"}]}`},
		{"batch metadata", `{"jobs":[{"kind":"email","metadata":{"X":"v"}}]}`},
	}
	bad := []struct{ name, text string }{
		{"invalid byte", "\xff"},
		{"latin-1", "\xe9t\xe9"},
		{"lone surrogate", `\udc00`},
		{"unpaired high surrogate", `\ud800`},
	}
	before := storeView(t, f)
	for _, fl := range fields {
		for _, b := range bad {
			t.Run(fl.name+"/"+b.name, func(t *testing.T) {
				path := APIPrefix + "/jobs"
				if strings.HasPrefix(fl.name, "batch") {
					path += "/batch"
				}
				res, body := f.call(&f.app, "POST", path, strings.Replace(fl.tmpl, "X", b.text, 1))
				require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s", body)
				require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
				require.Contains(t, string(body), `"type":"`+ProblemBadRequest+`"`)
				require.Equal(t, before, storeView(t, f), "the store changed")
			})
		}
	}
	// The same requests with good text go through.
	for _, fl := range fields {
		path := APIPrefix + "/jobs"
		if strings.HasPrefix(fl.name, "batch") {
			path += "/batch"
		}
		res, body := f.call(&f.app, "POST", path, strings.Replace(fl.tmpl, "X", `é\u00e9\ud83d\ude00`, 1))
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, res.StatusCode, "%s: %s", fl.name, body)
	}
}

// TestSubmitPayloadDepth: a payload nested deeper than MaxPayloadDepth is
// refused with 400; one exactly that deep is taken.
func TestSubmitPayloadDepth(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	before := storeView(t, f)
	for _, body := range []string{
		`{"kind":"deep","payload":` + nest(MaxPayloadDepth+1) + `}`,
		`{"kind":"deep","payload":` + nest(9000) + `}`,
		`{"jobs":[{"kind":"deep","payload":` + nest(MaxPayloadDepth+1) + `}]}`,
		// Issue 25's request: three 18 KB payloads nested 9,000 deep, 54 KB.
		`{"jobs":[{"kind":"deep","payload":` + nest(9000) + `},{"kind":"deep","payload":` + nest(9000) + `},{"kind":"deep","payload":` + nest(9000) + `}]}`,
	} {
		path := APIPrefix + "/jobs"
		if strings.HasPrefix(body, `{"jobs"`) {
			path += "/batch"
		}
		res, b := f.call(&f.app, "POST", path, body)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s", b)
		require.Contains(t, string(b), "nested more than 64 deep")
		require.Equal(t, before, storeView(t, f), "the store changed")
	}
	res, b := f.call(&f.app, "POST", APIPrefix+"/jobs", `{"kind":"deep","payload":`+nest(MaxPayloadDepth)+`}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", b)
}
