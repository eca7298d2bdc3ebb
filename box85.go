package ax

import "encoding/binary"

// The box of a version-2 envelope (sealing.go) is written in base 85:
// every 4 bytes become 5 characters, where base64 makes 4 of 3, so a
// sealed 1 KB payload is about 90 bytes (6 %) shorter, in every copy of
// the row the store writes. The alphabet is printable ASCII without the
// characters a JSON string must escape (" and \), those encoding/json
// escapes for HTML (<, > and &), the quote ' and space, so the box is
// written as is inside a JSON string and survives a JSON re-encoding
// byte for byte. A last group of n < 4 bytes becomes n+1 characters, as
// in Ascii85 (the group is padded with zeros to encode, with the highest
// digit to decode).

const box85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%()*+-./:=?@[]^_{|}~"

// box85Digits maps a character to its digit, 0xff for characters outside
// the alphabet.
var box85Digits = func() (d [256]byte) {
	for i := range d {
		d[i] = 0xff
	}
	for i := range len(box85Alphabet) {
		d[box85Alphabet[i]] = byte(i)
	}
	return d
}()

// box85Pairs holds the two characters of every number below 85², so that
// a group is encoded with two divisions instead of four.
var box85Pairs = func() (p [85 * 85][2]byte) {
	for i := range p {
		p[i] = [2]byte{box85Alphabet[i/85], box85Alphabet[i%85]}
	}
	return p
}()

// box85EncodedLen returns the length of n bytes encoded.
func box85EncodedLen(n int) int {
	if r := n % 4; r != 0 {
		return n/4*5 + r + 1
	}
	return n / 4 * 5
}

// box85DecodedLen returns the length of n characters decoded, or -1 when
// no input encodes to n characters.
func box85DecodedLen(n int) int {
	switch r := n % 5; r {
	case 0:
		return n / 5 * 4
	case 1:
		return -1
	default:
		return n/5*4 + r - 1
	}
}

// box85Encode writes src encoded to dst[:box85EncodedLen(len(src))].
// dst and src may overlap in one way only: src may be the last
// len(src) bytes of dst[:box85EncodedLen(len(src))] (seal encodes in
// place so), since each group is read whole before its characters are
// written, and the characters never reach past the group being read.
func box85Encode(dst, src []byte) {
	n := len(src)
	o := 0
	for i := 0; i+4 <= n; i += 4 {
		v := binary.BigEndian.Uint32(src[i:])
		q := v / (85 * 85)
		lo := box85Pairs[v-q*(85*85)]
		hi := box85Pairs[q%(85*85)]
		d := dst[o : o+5 : o+5]
		d[0] = box85Alphabet[q/(85*85)]
		d[1], d[2] = hi[0], hi[1]
		d[3], d[4] = lo[0], lo[1]
		o += 5
	}
	if r := n % 4; r != 0 {
		var g [4]byte
		copy(g[:], src[n-r:])
		v := binary.BigEndian.Uint32(g[:])
		var c [5]byte
		for j := 4; j >= 0; j-- {
			c[j] = box85Alphabet[v%85]
			v /= 85
		}
		copy(dst[o:o+r+1], c[:r+1])
	}
}

// box85Decode writes src decoded to dst[:box85DecodedLen(len(src))] and
// reports whether src is valid: characters of the alphabet, a length
// box85DecodedLen accepts, and groups that stand for 32 bits.
func box85Decode(dst, src []byte) bool {
	n := len(src)
	if box85DecodedLen(n) < 0 || len(dst) < box85DecodedLen(n) {
		return false
	}
	o := 0
	var bad byte
	for i := 0; i+5 <= n; i += 5 {
		s := src[i : i+5 : i+5]
		d0, d1, d2, d3, d4 := box85Digits[s[0]], box85Digits[s[1]], box85Digits[s[2]], box85Digits[s[3]], box85Digits[s[4]]
		bad |= d0 | d1 | d2 | d3 | d4
		v := (((uint64(d0)*85+uint64(d1))*85+uint64(d2))*85+uint64(d3))*85 + uint64(d4)
		if v > 0xffffffff {
			return false
		}
		binary.BigEndian.PutUint32(dst[o:], uint32(v))
		o += 4
	}
	if bad&0x80 != 0 { // 0xff marks a character outside the alphabet; digits are < 85
		return false
	}
	if r := n % 5; r != 0 {
		var v uint64
		for j := range 5 {
			d := byte(84)
			if j < r {
				if d = box85Digits[src[n-r+j]]; d == 0xff {
					return false
				}
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return false
		}
		var g [4]byte
		binary.BigEndian.PutUint32(g[:], uint32(v))
		copy(dst[o:], g[:r-1])
	}
	return true
}
