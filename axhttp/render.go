package axhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/axsched/ax/store"
)

// Bounds on what a dashboard page renders of one job, whatever the job
// holds: a payload nested 9,000 deep, pretty-printed whole, is a 162 MB
// page. Past a bound the page says the value is cut and links to it raw
// (rawPart), so the page stays under about half a megabyte however
// hostile the job, and the whole value is one click away.
const (
	// pageValueBytes bounds the pretty-printed text of a payload or a
	// result.
	pageValueBytes = 16 << 10
	// pageValueDepth is how many nesting levels are indented; deeper
	// values are printed compactly on their line, so indentation never
	// grows past pageValueDepth*2 spaces a line.
	pageValueDepth = 16
	// pageErrorBytes bounds each attempt's error text and stack.
	pageErrorBytes = 4 << 10
	// pageErrors is how many attempt errors a page shows: the most
	// recent ones.
	pageErrors = 10
	// pageMetaEntries, pageMetaKeyBytes and pageMetaValueBytes bound the
	// metadata table.
	pageMetaEntries    = 50
	pageMetaKeyBytes   = 128
	pageMetaValueBytes = 512
)

// shown is a value as a page shows it: Text, and whether it was cut.
type shown struct {
	Text string
	Cut  bool
}

// boundedJSON pretty-prints the JSON text raw in at most maxBytes bytes,
// indenting maxDepth levels at most (deeper levels stay on one line). It
// reads raw once and stops when the output is full, so its time and
// memory are bounded by maxBytes, not by raw's size or depth. A raw that
// is not JSON is shown as text, cut likewise.
func boundedJSON(raw []byte, maxBytes, maxDepth int) shown {
	if len(raw) == 0 {
		return shown{}
	}
	if !json.Valid(raw) {
		return boundedText(string(raw), maxBytes)
	}
	var b bytes.Buffer
	b.Grow(min(maxBytes, 2*len(raw)) + 64)
	depth, inString := 0, false
	// pretty reports whether contents at depth d are indented.
	pretty := func(d int) bool { return d <= maxDepth }
	newline := func(d int) {
		b.WriteByte('\n')
		for range min(d, maxDepth) {
			b.WriteString("  ")
		}
	}
	i := 0
	for ; i < len(raw) && b.Len() < maxBytes; i++ {
		c := raw[i]
		if inString {
			b.WriteByte(c)
			switch c {
			case '\\':
				if i+1 < len(raw) {
					i++
					b.WriteByte(raw[i])
				}
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			b.WriteByte(c)
		case '{', '[':
			b.WriteByte(c)
			depth++
			j := i + 1
			for j < len(raw) && (raw[j] == ' ' || raw[j] == '\t' || raw[j] == '\n' || raw[j] == '\r') {
				j++
			}
			if j < len(raw) && (raw[j] == '}' || raw[j] == ']') {
				b.WriteByte(raw[j]) // empty: {} or []
				depth--
				i = j
			} else if pretty(depth) {
				newline(depth)
			}
		case '}', ']':
			if pretty(depth) {
				newline(depth - 1)
			}
			depth--
			b.WriteByte(c)
		case ',':
			b.WriteByte(c)
			if pretty(depth) {
				newline(depth)
			}
		case ':':
			b.WriteString(": ")
		default:
			b.WriteByte(c)
		}
	}
	rest := raw[i:]
	for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r') {
		rest = rest[1:]
	}
	if len(rest) == 0 && b.Len() <= maxBytes {
		return shown{Text: b.String()}
	}
	return shown{Text: cutUTF8(b.Bytes(), maxBytes), Cut: true}
}

// boundedText is s cut to at most maxBytes bytes, on a character
// boundary.
func boundedText(s string, maxBytes int) shown {
	if len(s) <= maxBytes {
		return shown{Text: s}
	}
	return shown{Text: cutUTF8([]byte(s), maxBytes), Cut: true}
}

// cutUTF8 returns at most the first n bytes of b, without a character
// cut in two at the end.
func cutUTF8(b []byte, n int) string {
	b = b[:min(n, len(b))]
	for range utf8.UTFMax - 1 {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return string(b)
}

// shownAttempt is one failed attempt as a page shows it.
type shownAttempt struct {
	store.AttemptError
	Text shown
}

// shownMeta is one metadata entry as a page shows it.
type shownMeta struct {
	Key, Value shown
}

// jobView is what the job page shows of a job's values, each bounded.
type jobView struct {
	Payload, Result shown
	Meta            []shownMeta
	MetaCut         bool // entries were left out, or cut
	Attempts        []shownAttempt
	EarlierAttempts int // failed attempts not shown (older ones)
}

// viewOf bounds what the job page shows of rec.
func viewOf(rec *store.JobRecord) jobView {
	v := jobView{
		Payload: boundedJSON(rec.Payload, pageValueBytes, pageValueDepth),
		Result:  boundedJSON(rec.Result, pageValueBytes, pageValueDepth),
	}
	markSealed(rec.Payload, rec.Result, &v) // sealed.go
	keys := make([]string, 0, len(rec.Metadata))
	for k := range rec.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > pageMetaEntries {
		keys, v.MetaCut = keys[:pageMetaEntries], true
	}
	for _, k := range keys {
		m := shownMeta{boundedText(k, pageMetaKeyBytes), metaValue(rec.Metadata[k])}
		v.MetaCut = v.MetaCut || m.Key.Cut || m.Value.Cut
		v.Meta = append(v.Meta, m)
	}
	errs := rec.Errors
	if len(errs) > pageErrors {
		v.EarlierAttempts = len(errs) - pageErrors
		errs = errs[len(errs)-pageErrors:]
	}
	for _, e := range errs {
		v.Attempts = append(v.Attempts, shownAttempt{AttemptError: e, Text: boundedText(e.Error, pageErrorBytes)})
	}
	return v
}

// rawParts are the values of a job served whole by GET /jobs/{id}/raw/{part}.
var rawParts = []string{"payload", "result", "metadata", "errors"}

// rawPart serves one value of a job whole, as the store holds it: the
// payload and result byte for byte (not re-indented), the metadata and
// the attempt errors as JSON. The answer is application/json with
// nosniff and a sandboxing CSP, so a browser never runs or renders it as
// a page; it is a download-sized read of one value, streamed as it is.
func (h *Handler) rawPart(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	part := r.PathValue("part")
	if err == nil && !slices.Contains(rawParts, part) {
		h.dashError(w, r, http.StatusNotFound, "There is no such value.")
		return
	}
	var rec *store.JobRecord
	if err == nil {
		rec, err = h.reader(r).Get(r.Context(), id)
	}
	if err != nil {
		h.dashProblem(w, r, err)
		return
	}
	rec = h.forCaller(r, rec)
	var body []byte
	switch part {
	case "payload":
		body = rec.Payload
	case "result":
		body = rec.Result
	case "metadata":
		body, err = json.Marshal(rec.Metadata)
	case "errors":
		body, err = json.Marshal(rec.Errors)
	}
	if err != nil {
		h.dashProblem(w, r, err)
		return
	}
	if len(body) == 0 {
		body = []byte("null")
	}
	ct := "application/json"
	if !json.Valid(body) {
		ct = "text/plain; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}
