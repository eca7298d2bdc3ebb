package ax

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBox85Alphabet(t *testing.T) {
	require.Len(t, box85Alphabet, 85)
	seen := map[rune]bool{}
	for _, c := range box85Alphabet {
		require.False(t, seen[c], "%q twice", c)
		seen[c] = true
		require.True(t, c > ' ' && c < 0x7f, "%q not printable ASCII", c)
	}
	require.False(t, strings.ContainsAny(box85Alphabet, "\"\\<>&' "))
	// Written inside a JSON string as is, and kept so by encoding/json.
	b, err := json.Marshal(box85Alphabet)
	require.NoError(t, err)
	require.Equal(t, `"`+box85Alphabet+`"`, string(b))
}

func TestBox85RoundTrip(t *testing.T) {
	fill := map[string]func([]byte){
		"zeros": func([]byte) {},
		"ones": func(b []byte) {
			for i := range b {
				b[i] = 0xff
			}
		},
		"random": func(b []byte) { _, _ = rand.Read(b) },
	}
	for name, f := range fill {
		for n := range 70 {
			src := make([]byte, n)
			f(src)
			enc := make([]byte, box85EncodedLen(n))
			box85Encode(enc, src)
			require.Equal(t, n, box85DecodedLen(len(enc)), "%s n=%d", name, n)
			for _, c := range enc {
				require.True(t, strings.IndexByte(box85Alphabet, c) >= 0)
			}
			// In place, as seal encodes: the input at the end of the output.
			inPlace := make([]byte, len(enc))
			copy(inPlace[len(enc)-n:], src)
			box85Encode(inPlace, inPlace[len(enc)-n:])
			require.Equal(t, enc, inPlace, "%s n=%d: in place", name, n)
			dec := make([]byte, n)
			require.True(t, box85Decode(dec, enc), "%s n=%d", name, n)
			require.Equal(t, src, dec, "%s n=%d", name, n)
		}
	}
}

func TestBox85DecodeRefuses(t *testing.T) {
	for _, c := range []struct{ name, in string }{
		{"OneCharGroup", "0"},
		{"SixChars", "000000"},
		{"OutsideAlphabet", "00'00"},
		{"Quote", `00"00`},
		{"NonASCII", "00\xc3\xa900"},
		{"GroupOver32Bits", "~~~~~"},
		{"LastGroupOver32Bits", "00000~~~~"},
		{"BadInLastGroup", "00000 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := max(box85DecodedLen(len(c.in)), 0)
			require.False(t, box85Decode(make([]byte, n+4), []byte(c.in)))
		})
	}
	// The largest group, 0xffffffff, decodes.
	enc := make([]byte, 5)
	box85Encode(enc, []byte{0xff, 0xff, 0xff, 0xff})
	dec := make([]byte, 4)
	require.True(t, box85Decode(dec, enc))
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0xff}, dec)
}

func FuzzBox85(f *testing.F) {
	f.Add([]byte("ax"), []byte("0000A"))
	f.Fuzz(func(t *testing.T, src, text []byte) {
		enc := make([]byte, box85EncodedLen(len(src)))
		box85Encode(enc, src)
		dec := make([]byte, len(src))
		if !box85Decode(dec, enc) || !bytes.Equal(dec, src) {
			t.Fatalf("round trip of %x: %q", src, enc)
		}
		// Any text: no panic, and what decodes encodes back to itself or
		// to the same bytes.
		if n := box85DecodedLen(len(text)); n >= 0 {
			out := make([]byte, n)
			if box85Decode(out, text) {
				again := make([]byte, box85EncodedLen(n))
				box85Encode(again, out)
				back := make([]byte, n)
				if !box85Decode(back, again) || !bytes.Equal(back, out) {
					t.Fatalf("%q decodes to %x, which does not round-trip", text, out)
				}
			}
		}
	})
}
