package ax

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// A sealed value is stored as a JSON object, so that every store keeps it
// unchanged where it keeps JSON (payloads, results) or strings (metadata):
//
//	{"ax_sealed":3,"key":"2026-12","to":"job","box":"<base 85>"}
//
// key names the KeyRing key that sealed it; box (in base 85, box85.go) is
// a 24-byte random salt followed by the AES-256-GCM ciphertext and tag.
// The value is sealed with a key of its own, derived from the ring's key
// and the salt with HKDF-SHA256 (keyDeriver), and an all-zero nonce: each derived key
// seals one value, so the nonce budget of AES-GCM (random 96-bit nonces:
// 2^32 values per key, reached in about 29 hours at 41,083 jobs/s) no
// longer applies to the ring's key. What bounds a key now is that two
// values draw the same 192-bit salt: after n values sealed with one key,
// the chance is below n²/2^193, under 2^-65 after 2^64 values (over ten
// million years at 41,083 values a second), so a key needs no rotation
// for this. The associated data binds the value to where it belongs: the
// format version, the part of the job ("payload", "result",
// "metadata:<name>"), the key ID and the job it was sealed for (to), so a
// value copied into another job, or from a job's payload to its result,
// does not open. "to" says which of the job's names that is: "job" its
// own ID (payloads, results, Then jobs), "parent" its Parent's ID
// (FollowUp jobs, whose IDs the store picks when the parent ends),
// "schedule" its periodic schedule's name (the template
// Admin.TriggerSchedule inserts with an ID of its own).
//
// Versions 1 and 2 (v1.0 writes 2) seal with the ring's key itself and a
// 12-byte random nonce at the start of the box (version 1 in standard
// base64, version 2 in base 85). A ring writes version 2 by default
// (EnvelopeV1), since v1.0 hosts do not read version 3 and a rolling
// deploy within v1 needs no order; it writes version 3 when told to
// (KeyRing.WithEnvelopeVersion(EnvelopeV3), "envelope": 3 in its file).
// Every version opens, and re-encryption to a new current key rewrites
// values in the ring's version.

// Errors of sealed values. They are wrapped in a *SealError naming the
// key and the part of the job.
var (
	// ErrKeyMissing is the error of a sealed value whose key is not in the
	// key ring at hand (or there is no key ring).
	ErrKeyMissing = errors.New("ax: encryption key not in the key ring")
	// ErrSealBroken is the error of a sealed value that does not
	// authenticate: changed in the store, copied from another job or
	// another part of the job, or sealed by a different key of the same
	// ID.
	ErrSealBroken = errors.New("ax: sealed value does not authenticate (changed, moved from another job, or another key with this ID)")
	// ErrSealFormat is the error of a value sealed in an envelope format
	// newer than this host reads (by a newer release of ax): upgrade the
	// host. Such a value is never handed to a handler as if it were plain.
	ErrSealFormat = errors.New("ax: sealed value in an envelope format this version of ax does not read")
)

// SealError is the error of a sealed value that could not be opened.
// Its text names the key ID and never holds the value.
type SealError struct {
	// KeyID is the key the value names ("" if the envelope is unreadable).
	KeyID string
	// Part is what was opened: "payload", "result" or "metadata:<name>".
	Part string
	// Err is ErrKeyMissing, ErrSealBroken or ErrSealFormat.
	Err error
}

// Error names the part, the key and the reason.
func (e *SealError) Error() string {
	return fmt.Sprintf("open encrypted %s (key %q): %v", e.Part, e.KeyID, e.Err)
}

// Unwrap returns Err.
func (e *SealError) Unwrap() error { return e.Err }

// Where a sealed value is bound (the envelope's "to").
const (
	bindJob      = "job"
	bindParent   = "parent"
	bindSchedule = "schedule"
)

const (
	sealVersion    = EnvelopeV3 // the newest version seal writes (EnvelopeV1 by default)
	maxSealVersion = 3          // open reads 1 to 3
	sealPrefix     = `{"ax_sealed":3,`
	// sealMark starts every envelope seal writes, in any format version,
	// so that a value of a later format is recognized as sealed (and
	// refused with ErrSealFormat) rather than taken for a plain one.
	sealMark    = `{"ax_sealed":`
	partPayload = "payload"
	partResult  = "result"
	nonceSize   = 12 // versions 1 and 2: the box's random nonce
	saltSize    = 24 // version 3: the box's random salt
	gcmTagSize  = 16
	// deriveLabel starts HKDF-Expand's info for version 3, followed by the
	// value's salt: the derived bytes are the AES-256 key of one value.
	deriveLabel = "ax-sealed-3 aes-256-gcm key\x00"
)

// zeroNonce is version 3's GCM nonce: each derived key seals one value,
// so the nonce needs no randomness of its own.
var zeroNonce [nonceSize]byte

// envelope is a sealed value's JSON form.
type envelope struct {
	Sealed int    `json:"ax_sealed"`
	Key    string `json:"key"`
	To     string `json:"to"`
	Box    string `json:"box"`
}

// sealedView is a parsed envelope. Its slices point into the bytes
// parsed when they are in seal's form (no copy of the box on the path
// that opens every job), into a copy otherwise.
type sealedView struct {
	version      int
	key, to, box []byte
}

// sealRefs are the names a job's sealed values may be bound to.
type sealRefs struct {
	job, parent uuid.UUID
	schedule    string
}

// ref returns the bytes a value bound to "to" is authenticated with.
func (r sealRefs) ref(to string) (string, bool) {
	switch to {
	case bindJob:
		return string(r.job[:]), r.job != uuid.Nil
	case bindParent:
		return string(r.parent[:]), r.parent != uuid.Nil
	case bindSchedule:
		return r.schedule, r.schedule != ""
	}
	return "", false
}

// associatedData is what a sealed value of the format version is
// authenticated with besides its ciphertext.
func associatedData[S string | []byte](version int, part string, to, keyID S, ref string) []byte {
	b := make([]byte, 0, 16+len(part)+len(to)+len(keyID)+len(ref))
	b = append(b, "ax-sealed-"...)
	b = append(b, byte('0'+version), 0)
	b = append(b, part...)
	b = append(b, 0)
	b = append(b, to...)
	b = append(b, 0)
	b = append(b, keyID...)
	b = append(b, 0)
	return append(b, ref...)
}

// seal returns plain sealed with the current key for part of the job ref
// names (to: bindJob, bindParent or bindSchedule), in the ring's envelope
// version (3 unless WithEnvelopeVersion said 2). The output is its only
// allocation of a size that grows with plain: the salt (or nonce) and
// ciphertext are written at its end and encoded in place.
func (r *KeyRing) seal(plain []byte, part, to, ref string) ([]byte, error) {
	version := r.envelope()
	aead := r.aeads[r.current]
	head := len(sealMark) + len(`1,"key":"","to":"","box":"`) + len(r.current) + len(to)
	random := saltSize
	if version < 3 {
		random = nonceSize
	}
	boxLen := random + len(plain) + aead.Overhead()
	encLen := box85EncodedLen(boxLen)
	out := make([]byte, head+encLen+len(`"}`))
	h := append(out[:0], sealMark...)
	h = append(h, byte('0'+version), ',')
	h = append(h, `"key":"`...)
	h = append(h, r.current...)
	h = append(h, `","to":"`...)
	h = append(h, to...)
	h = append(h, `","box":"`...)
	enc := out[head : head+encLen]
	box := enc[encLen-boxLen : encLen-boxLen : encLen] // the box sits at the end of its encoding
	salt := box[:random]
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("seal %s: random: %w", part, err)
	}
	nonce := salt
	if version >= 3 {
		var err error
		if aead, err = r.derivers[r.current].aead(salt); err != nil {
			return nil, fmt.Errorf("seal %s: %w", part, err)
		}
		nonce = zeroNonce[:]
	}
	box = aead.Seal(salt, nonce, plain, associatedData(version, part, to, r.current, ref))
	box85Encode(enc, box)
	copy(out[head+encLen:], `"}`)
	return out, nil
}

// keyDeriver derives the key of each version 3 value sealed with one
// ring key: HKDF-Expand (RFC 5869) with SHA-256, the ring key as the
// pseudorandom key (it is uniformly random, so the Extract step adds
// nothing), deriveLabel and the value's salt as info, 32 bytes long:
// that is one HMAC-SHA256, HMAC(ring key, label || salt || 0x01). Its
// HMAC states are pooled, so a derivation costs two SHA-256 blocks and
// no allocation; the test checks the result against crypto/hkdf.
type keyDeriver struct{ macs sync.Pool }

func newKeyDeriver(secret []byte) *keyDeriver {
	secret = slices.Clone(secret)
	d := &keyDeriver{}
	d.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return d
}

// aead returns the AES-256-GCM cipher of the value whose salt is salt.
func (d *keyDeriver) aead(salt []byte) (cipher.AEAD, error) {
	mac := d.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(deriveLabelBytes)
	mac.Write(salt)
	mac.Write(hkdfCounter)
	var key [sha256.Size]byte
	mac.Sum(key[:0])
	d.macs.Put(mac)
	block, err := aes.NewCipher(key[:])
	clear(key[:])
	if err != nil {
		return nil, fmt.Errorf("derive key: %w", err)
	}
	return cipher.NewGCM(block)
}

var (
	deriveLabelBytes = []byte(deriveLabel)
	hkdfCounter      = []byte{1} // HKDF-Expand's first block
)

// open returns the plain value of sealed, which is part of the job refs
// names. r may be nil (no key ring): every sealed value then fails with
// ErrKeyMissing. sealed is not changed; the plain value is a new slice.
func (r *KeyRing) open(sealed []byte, part string, refs sealRefs) ([]byte, error) {
	env, ok := parseEnvelope(sealed)
	if !ok {
		return nil, &SealError{Part: part, Err: ErrSealBroken}
	}
	if env.version > maxSealVersion {
		return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrSealFormat}
	}
	var aead cipher.AEAD
	if r != nil {
		aead = r.aeads[string(env.key)]
	}
	if aead == nil {
		if _, ok := wellFormedEnvelope(sealed); !ok {
			// A plain value that merely looks sealed, or a damaged
			// envelope: no host opens it, so it is not waiting for a key.
			return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrSealBroken}
		}
		return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrKeyMissing}
	}
	ref, ok := refs.ref(string(env.to))
	// The box (salt or nonce, and ciphertext) is decoded into a pooled
	// buffer, and only the plain value, of its exact size, is allocated.
	scratch := boxScratch.Get().(*[]byte)
	defer putBoxScratch(scratch)
	box, decoded := decodeBox((*scratch)[:0], env)
	*scratch = box
	random := nonceSize
	if env.version >= 3 {
		random = saltSize
	}
	if !ok || !decoded || len(box) < random+aead.Overhead() {
		return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrSealBroken}
	}
	nonce := box[:random]
	if env.version >= 3 {
		var err error
		if aead, err = r.derivers[string(env.key)].aead(box[:random]); err != nil {
			return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrSealBroken}
		}
		nonce = zeroNonce[:]
	}
	plain := make([]byte, 0, len(box)-random-aead.Overhead())
	plain, err := aead.Open(plain, nonce, box[random:], associatedData(env.version, part, env.to, env.key, ref))
	if err != nil {
		return nil, &SealError{KeyID: string(env.key), Part: part, Err: ErrSealBroken}
	}
	return plain, nil
}

// boxScratch holds *[]byte buffers open decodes boxes into: ciphertext
// only, never a plain value.
var boxScratch = sync.Pool{New: func() any { return new([]byte) }}

// maxBoxScratch bounds the buffers boxScratch keeps, so that one large
// value does not stay in the pool.
const maxBoxScratch = 64 << 10

func putBoxScratch(b *[]byte) {
	if cap(*b) <= maxBoxScratch {
		boxScratch.Put(b)
	}
}

// decodeBox returns the nonce and ciphertext of env, appended to dst
// (its capacity grown if short).
func decodeBox(dst []byte, env sealedView) ([]byte, bool) {
	n := box85DecodedLen(len(env.box))
	if env.version == 1 {
		n = base64.StdEncoding.DecodedLen(len(env.box))
	}
	if n < 0 {
		return dst, false
	}
	box := slices.Grow(dst, n)[len(dst) : len(dst)+n]
	if env.version == 1 {
		m, err := base64.StdEncoding.Decode(box, env.box)
		return box[:m], err == nil
	}
	return box, box85Decode(box, env.box)
}

// parseEnvelope reads a sealed value: the form seal writes at once,
// anything else (a value a JSON tool reformatted) through encoding/json.
func parseEnvelope(b []byte) (sealedView, bool) {
	if env, ok := parseCanonical(b); ok {
		return env, true
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil || env.Sealed < 1 || env.Key == "" {
		return sealedView{}, false
	}
	return sealedView{version: env.Sealed, key: []byte(env.Key), to: []byte(env.To), box: []byte(env.Box)}, true
}

// parseCanonical reads the envelope as seal writes it (any version V
// from 1 to 99): {"ax_sealed":V,"key":"K","to":"T","box":"B"}, none of
// K, T and B holding a quote or a backslash. The view points into b.
func parseCanonical(b []byte) (sealedView, bool) {
	var env sealedView
	rest, ok := bytes.CutPrefix(b, []byte(sealMark))
	if !ok {
		return env, false
	}
	i := 0
	for ; i < len(rest) && i < 2 && rest[i] >= '0' && rest[i] <= '9'; i++ {
		env.version = 10*env.version + int(rest[i]-'0')
	}
	if env.version < 1 || i == 0 || rest[0] == '0' {
		return env, false
	}
	rest, ok = bytes.CutPrefix(rest[i:], []byte(`,"key":"`))
	if !ok {
		return env, false
	}
	for _, f := range [...]struct {
		dst  *[]byte
		next string
	}{{&env.key, `","to":"`}, {&env.to, `","box":"`}, {&env.box, `"}`}} {
		i := bytes.IndexByte(rest, '"')
		if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 || !bytes.HasPrefix(rest[i:], []byte(f.next)) {
			return env, false
		}
		*f.dst, rest = rest[:i:i], rest[i+len(f.next):]
	}
	return env, len(rest) == 0 && len(env.key) > 0
}

// IsSealed reports whether a payload, result or metadata value is sealed
// (see Config.Keys). Tools without the key ring show such values as
// encrypted, so a plain value must not pass for one: a value is sealed
// only when it is a whole envelope, of exactly its four members, with a
// valid key ID, a known binding and a box that decodes to at least a
// salt (or nonce) and a tag. A JSON object that merely has an
// "ax_sealed" member is plain. (A value of an envelope version newer
// than this release reads needs only its version and a valid key ID.)
func IsSealed[T []byte | json.RawMessage | string](v T) bool {
	_, ok := wellFormedEnvelope([]byte(v))
	return ok
}

// SealedKeyID returns the ID of the key that sealed v, or "" for a value
// that is not sealed (IsSealed).
func SealedKeyID[T []byte | json.RawMessage | string](v T) string {
	env, ok := wellFormedEnvelope([]byte(v))
	if !ok {
		return ""
	}
	return string(env.key)
}

// wellFormedEnvelope parses v as IsSealed says.
func wellFormedEnvelope(v []byte) (sealedView, bool) {
	b := bytes.TrimLeft(v, " \t\r\n")
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"ax_sealed"`)) {
		return sealedView{}, false
	}
	env, ok := parseEnvelope(b)
	if !ok || checkKeyID(string(env.key)) != nil {
		return env, false
	}
	if env.version > maxSealVersion {
		return env, true
	}
	if _, canonical := parseCanonical(b); !canonical {
		var members map[string]json.RawMessage
		if json.Unmarshal(b, &members) != nil || len(members) != 4 {
			return env, false
		}
	}
	switch string(env.to) {
	case bindJob, bindParent, bindSchedule:
	default:
		return env, false
	}
	box, decoded := decodeBox(nil, env)
	random := nonceSize
	if env.version >= 3 {
		random = saltSize
	}
	return env, decoded && len(box) >= random+gcmTagSize
}

// mightBeSealed is IsSealed's cheap first test, for hot paths: a sealed
// value starts with sealMark and a digit from 1 to 9 (seal writes it so,
// in every format version, and every store keeps payloads, results and
// metadata strings byte for byte).
func mightBeSealed(b []byte) bool {
	return len(b) > len(sealMark) && b[len(sealMark)] >= '1' && b[len(sealMark)] <= '9' && bytes.HasPrefix(b, []byte(sealMark))
}

// metadataPart is the part name of the metadata value name.
func metadataPart(name string) string { return "metadata:" + name }

// sealedString reports, cheaply, whether a metadata value is sealed.
func sealedString(v string) bool {
	return len(v) > len(sealMark) && v[len(sealMark)] >= '1' && v[len(sealMark)] <= '9' && strings.HasPrefix(v, sealMark)
}
