package ax

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Encryption at rest: a KeyRing in Config.Keys seals every payload and
// result (and the metadata values given with SecretMetadata) before they
// reach the store, and opens them only on the hosts and tools that hold
// the ring (sealing.go has the envelope).
//
// AES-256-GCM from the standard library (crypto/aes, crypto/cipher): it
// is kept with the Go toolchain, uses the CPU's AES instructions (a few
// hundred nanoseconds for a 1 KB payload), and needs no dependency. Each
// value is sealed with a key of its own, derived from the ring's key and
// a 192-bit random salt with HKDF-SHA256 (crypto/hkdf, envelope version
// 3 in sealing.go): GCM's limit of about 2^32 values per key with random
// 96-bit nonces does not apply, and a ring key seals 2^64 values with a
// chance below 2^-65 that two of them share a derived key. Rotation is
// for the keys' exposure, not for this bound.

// KeyLength is the length of a Key's Secret: 32 bytes, for AES-256.
const KeyLength = 32

// MaxKeyIDLength bounds a Key's ID.
const MaxKeyIDLength = 64

// ErrInvalidKey is returned for a Key or key ring file that cannot be
// used: a secret that is not KeyLength bytes, an ID that is empty, too
// long or not made of letters, digits, '.', '-' and '_', or two keys with
// one ID.
var ErrInvalidKey = errors.New("ax: invalid encryption key")

// Key is one encryption key of a KeyRing.
type Key struct {
	// ID names the key in every value it seals, so that the value opens
	// after the key is no longer the current one: 1 to MaxKeyIDLength
	// letters, digits, '.', '-' or '_' ("2026-12" for a monthly key).
	ID string
	// Secret is KeyLength random bytes (see GenerateKey).
	Secret []byte
}

// GenerateKey returns a Key named id with a fresh random secret.
func GenerateKey(id string) (Key, error) {
	k := Key{ID: id, Secret: make([]byte, KeyLength)}
	if err := checkKeyID(id); err != nil {
		return Key{}, err
	}
	if _, err := rand.Read(k.Secret); err != nil {
		return Key{}, fmt.Errorf("generate key %q: %w", id, err)
	}
	return k, nil
}

// KeyRing holds the current key, which seals new values, and older keys,
// which still open the values they sealed. It is immutable and safe for
// concurrent use.
type KeyRing struct {
	current  string
	ids      []string // current first, then the older keys as given
	aeads    map[string]cipher.AEAD
	derivers map[string]*keyDeriver // version 3 derives each value's key
	// version is the envelope version seal writes; 0 means EnvelopeV1.
	version int
}

// NewKeyRing returns a ring sealing with current and opening with current
// and every older key. It returns an error wrapping ErrInvalidKey for a
// key that cannot be used or an ID given twice.
func NewKeyRing(current Key, older ...Key) (*KeyRing, error) {
	r := &KeyRing{current: current.ID, aeads: make(map[string]cipher.AEAD, 1+len(older)),
		derivers: make(map[string]*keyDeriver, 1+len(older))}
	for _, k := range append([]Key{current}, older...) {
		if err := checkKeyID(k.ID); err != nil {
			return nil, err
		}
		if len(k.Secret) != KeyLength {
			return nil, fmt.Errorf("%w: key %q is %d bytes, want %d", ErrInvalidKey, k.ID, len(k.Secret), KeyLength)
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("%w: key ID %q given twice", ErrInvalidKey, k.ID)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrInvalidKey, k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrInvalidKey, k.ID, err)
		}
		r.aeads[k.ID] = aead
		r.derivers[k.ID] = newKeyDeriver(k.Secret)
		r.ids = append(r.ids, k.ID)
	}
	return r, nil
}

// EnvelopeV1 is the envelope version that ax v1.0 writes and reads (it
// reads versions 1 and 2), and the one a KeyRing seals in unless told
// otherwise: see KeyRing.WithEnvelopeVersion.
const EnvelopeV1 = 2

// EnvelopeV3 is the envelope version whose values each have a key of
// their own, derived from the ring key and a 192-bit random salt (HKDF-
// SHA256): a ring key seals up to 2^64 values with under a 2^-65 chance
// that two share a key, where EnvelopeV1's random 96-bit AES-GCM nonces
// bound a key to about 2^32 values. Releases before v1.1 do not read it.
const EnvelopeV3 = 3

// WithEnvelopeVersion returns a copy of the ring that seals new values in
// envelope version v: EnvelopeV1 (2, the default), what every v1 release
// reads, or EnvelopeV3, whose values each have a key of their own (no
// practical limit on how many values a key seals; see "Encryption at
// rest" in docs/guide.md). Every version opens with either ring.
//
// EnvelopeV1 stays the default in v1.1 because a v1.0 host fails a job
// sealed in version 3 permanently (it does not read the format), and a
// rolling deploy within v1 needs no order (docs/compatibility.md). Turn
// EnvelopeV3 on once no host older than v1.1 is left (a ring file says
// it with "envelope": 3, ParseKeyRing); a later minor release makes it
// the default. Any other v is an error wrapping ErrInvalidKey.
func (r *KeyRing) WithEnvelopeVersion(v int) (*KeyRing, error) {
	if v != EnvelopeV1 && v != EnvelopeV3 {
		return nil, fmt.Errorf("%w: envelope version %d: ax writes %d (every v1 release reads it) or %d", ErrInvalidKey, v, EnvelopeV1, EnvelopeV3)
	}
	c := *r
	c.version = v
	return &c, nil
}

// EnvelopeVersion returns the envelope version the ring seals new values
// in (see WithEnvelopeVersion).
func (r *KeyRing) EnvelopeVersion() int { return r.envelope() }

func (r *KeyRing) envelope() int {
	if r.version == 0 {
		return EnvelopeV1
	}
	return r.version
}

// Current returns the ID of the key that seals new values.
func (r *KeyRing) Current() string { return r.current }

// IDs returns the ring's key IDs, the current one first.
func (r *KeyRing) IDs() []string { return slices.Clone(r.ids) }

// Has reports whether the ring holds the key id.
func (r *KeyRing) Has(id string) bool {
	_, ok := r.aeads[id]
	return ok
}

// keyRingFile is the JSON form of a key ring file:
//
//	{"current": "2026-12",
//	 "keys": [{"id": "2026-12", "secret": "<base64 of 32 bytes>"},
//	          {"id": "2026-11", "secret": "..."}],
//	 "envelope": 3}
//
// envelope is optional (see KeyRing.WithEnvelopeVersion); v1.0 ignores it.
type keyRingFile struct {
	Current  string `json:"current"`
	Envelope int    `json:"envelope,omitempty"`
	Keys     []struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	} `json:"keys"`
}

// ParseKeyRing reads a key ring from its JSON form: an object with
// "current", the current key's ID, and "keys", a list of {"id", "secret"}
// objects whose secrets are KeyLength bytes in standard base64, and,
// optionally, "envelope", the envelope version new values are sealed in
// (3 once every host runs v1.1 or later: see KeyRing.WithEnvelopeVersion).
// Errors wrap ErrInvalidKey and never quote a secret.
func ParseKeyRing(data []byte) (*KeyRing, error) {
	var f keyRingFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: key ring is not a JSON object with \"current\" and \"keys\"", ErrInvalidKey)
	}
	var current Key
	var older []Key
	for _, k := range f.Keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: secret is not standard base64", ErrInvalidKey, k.ID)
		}
		if k.ID == f.Current && current.ID == "" {
			current = Key{ID: k.ID, Secret: secret}
			continue
		}
		older = append(older, Key{ID: k.ID, Secret: secret})
	}
	if current.ID == "" {
		return nil, fmt.Errorf("%w: current key %q is not among the keys", ErrInvalidKey, f.Current)
	}
	r, err := NewKeyRing(current, older...)
	if err != nil || f.Envelope == 0 {
		return r, err
	}
	return r.WithEnvelopeVersion(f.Envelope)
}

// LoadKeyRing reads a key ring file (see ParseKeyRing).
func LoadKeyRing(path string) (*KeyRing, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key ring: %w", err)
	}
	r, err := ParseKeyRing(data)
	if err != nil {
		return nil, fmt.Errorf("key ring %s: %w", path, err)
	}
	return r, nil
}

// MarshalKeyRing returns the JSON form of a ring of keys (ParseKeyRing
// reads it back), for tools that write key ring files.
func MarshalKeyRing(current Key, older ...Key) ([]byte, error) {
	if _, err := NewKeyRing(current, older...); err != nil {
		return nil, err
	}
	var f keyRingFile
	f.Current = current.ID
	for _, k := range append([]Key{current}, older...) {
		f.Keys = append(f.Keys, struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		}{k.ID, base64.StdEncoding.EncodeToString(k.Secret)})
	}
	return json.MarshalIndent(f, "", "  ")
}

// checkKeyID refuses an ID that could not be read back from an envelope
// or a log line unambiguously.
func checkKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLength {
		return fmt.Errorf("%w: key ID must be 1 to %d bytes", ErrInvalidKey, MaxKeyIDLength)
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		default:
			return fmt.Errorf("%w: key ID %q: only letters, digits, '.', '-' and '_'", ErrInvalidKey, id)
		}
	}
	return nil
}
