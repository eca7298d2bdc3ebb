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
// hundred nanoseconds for a 1 KB payload), and needs no dependency. Its
// 96-bit random nonces are safe for about 2^32 values per key, which
// rotation (a new current key every so often) keeps far away.

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
	current string
	ids     []string // current first, then the older keys as given
	aeads   map[string]cipher.AEAD
}

// NewKeyRing returns a ring sealing with current and opening with current
// and every older key. It returns an error wrapping ErrInvalidKey for a
// key that cannot be used or an ID given twice.
func NewKeyRing(current Key, older ...Key) (*KeyRing, error) {
	r := &KeyRing{current: current.ID, aeads: make(map[string]cipher.AEAD, 1+len(older))}
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
		r.ids = append(r.ids, k.ID)
	}
	return r, nil
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
//	          {"id": "2026-11", "secret": "..."}]}
type keyRingFile struct {
	Current string `json:"current"`
	Keys    []struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	} `json:"keys"`
}

// ParseKeyRing reads a key ring from its JSON form: an object with
// "current", the current key's ID, and "keys", a list of {"id", "secret"}
// objects whose secrets are KeyLength bytes in standard base64. Errors
// wrap ErrInvalidKey and never quote a secret.
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
	return NewKeyRing(current, older...)
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
