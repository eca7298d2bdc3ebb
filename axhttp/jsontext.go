package axhttp

import "unicode/utf8"

// MaxPayloadDepth is how deeply a payload submitted through the API may
// nest arrays and objects: {"a":[1]} is 2 deep. A deeper payload is
// refused with 400 before anything is stored. No handler needs more, and
// every reader of the job (the dashboard, clients decoding it) then has
// a bound to rely on.
const MaxPayloadDepth = 64

// checkJSONText refuses what encoding/json would silently rewrite to
// U+FFFD when decoding into a Go string: bytes that are not UTF-8, and
// \u escapes of a lone UTF-16 surrogate. A kind, a metadata key or value
// so rewritten would be a different text than the client sent (a kind
// no handler serves), so the request is refused instead. b is the whole
// request body, already decoded once without error (so it is JSON).
func checkJSONText(b []byte) error {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return badRequest("the body is not valid UTF-8 (byte %d)", i)
			}
			i += n
		}
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			i++
			if i >= len(b) || b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				continue
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return badRequest("lone UTF-16 surrogate \\u%04x in a string (byte %d)", r, i-1)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if i+6 < len(b) && b[i+5] == '\\' && b[i+6] == 'u' {
					lo, ok = hex4(b, i+7)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return badRequest("lone UTF-16 surrogate \\u%04x in a string (byte %d)", r, i-1)
				}
				i += 10 // the pair's second escape
			default:
				i += 4
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:], as after \u.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// jsonDepth returns how deeply the JSON text b nests arrays and objects,
// counting no further than limit+1: it reads b once and stops as soon as
// the depth passes limit.
func jsonDepth(b []byte, limit int) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// checkPayloadDepth refuses a payload nested deeper than MaxPayloadDepth.
func checkPayloadDepth(payload []byte) error {
	if d := jsonDepth(payload, MaxPayloadDepth); d > MaxPayloadDepth {
		return badRequest("payload: nested more than %d deep", MaxPayloadDepth)
	}
	return nil
}
