package axhttp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Request signing. A client signs each request with a key's secret; the
// server (Auth) recomputes the signature. The scheme, AX-HMAC-SHA256:
//
//	string to sign = "AX-HMAC-SHA256" "\n"
//	                 METHOD "\n"                   (upper case)
//	                 escaped path "\n"             (as sent: /ax/api/v1/jobs)
//	                 canonical query "\n"          (pairs sorted by key then value, each part
//	                                                query-escaped, joined by "&"; empty if none)
//	                 timestamp "\n"                (Unix seconds, decimal)
//	                 nonce "\n"                    (16 to 128 of [A-Za-z0-9_-], new for each request)
//	                 hex(SHA-256(body))            (of the empty string without a body)
//	signature = hex(HMAC-SHA256(secret, string to sign))
//
// sent in the headers X-AX-Key (the key ID), X-AX-Timestamp, X-AX-Nonce and
// X-AX-Signature. The server refuses a timestamp more than Auth.Window
// from its clock and a nonce it has seen within the window, so a captured
// request cannot be replayed. Completion callbacks are signed the same way
// by the server, so receivers verify them with VerifyRequest.
const (
	HeaderKey       = "X-AX-Key"
	HeaderTimestamp = "X-AX-Timestamp"
	HeaderNonce     = "X-AX-Nonce"
	HeaderSignature = "X-AX-Signature"

	signatureScheme = "AX-HMAC-SHA256"
)

// StringToSign returns the string a request's signature covers, given the
// hex SHA-256 of its body. It is exported for clients in other languages
// to check their implementation against.
func StringToSign(method, escapedPath, rawQuery string, timestamp int64, nonce, bodySHA256 string) (string, error) {
	q, err := canonicalQuery(rawQuery)
	if err != nil {
		return "", err
	}
	return strings.Join([]string{signatureScheme, strings.ToUpper(method), escapedPath, q,
		strconv.FormatInt(timestamp, 10), nonce, bodySHA256}, "\n"), nil
}

// canonicalQuery sorts a raw query's pairs by key, then value, and
// re-escapes each part, so that clients need not agree on escaping or
// order.
func canonicalQuery(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return "", fmt.Errorf("malformed query: %w", err)
	}
	pairs := make([]string, 0, len(vals))
	for k, vs := range vals {
		for _, v := range vs {
			pairs = append(pairs, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "&"), nil
}

// Signature returns hex(HMAC-SHA256(secret, stringToSign)).
func Signature(secret []byte, stringToSign string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(stringToSign))
	return hex.EncodeToString(m.Sum(nil))
}

// Signer signs requests with one key. The zero Clock is time.Now.
type Signer struct {
	// KeyID names the key (sent in X-AX-Key).
	KeyID string
	// Secret is the key's secret.
	Secret []byte
	// Clock returns the time stamped on requests. Defaults to time.Now.
	Clock func() time.Time
}

// Sign sets the signature headers of r, reading its body (and putting it
// back, so that r can still be sent).
func (s Signer) Sign(r *http.Request) error {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return fmt.Errorf("axhttp: sign: read body: %w", err)
		}
		_ = r.Body.Close()
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	now := time.Now
	if s.Clock != nil {
		now = s.Clock
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	return s.signWith(r, body, now().Unix(), nonce)
}

// signWith signs r for a body, timestamp and nonce already chosen.
func (s Signer) signWith(r *http.Request, body []byte, ts int64, nonce string) error {
	sum := sha256.Sum256(body)
	sts, err := StringToSign(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ts, nonce, hex.EncodeToString(sum[:]))
	if err != nil {
		return fmt.Errorf("axhttp: sign: %w", err)
	}
	r.Header.Set(HeaderKey, s.KeyID)
	r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(HeaderNonce, nonce)
	r.Header.Set(HeaderSignature, Signature(s.Secret, sts))
	return nil
}

// newNonce returns 22 random URL-safe characters (128 bits).
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("axhttp: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// validNonce reports whether n is 16 to 128 characters of [A-Za-z0-9_-].
func validNonce(n string) bool {
	if len(n) < 16 || len(n) > 128 {
		return false
	}
	for _, c := range []byte(n) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
