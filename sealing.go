package ax

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// A sealed value is stored as a JSON object, so that every store keeps it
// unchanged where it keeps JSON (payloads, results) or strings (metadata):
//
//	{"ax_sealed":1,"key":"2026-12","to":"job","box":"<base64>"}
//
// key names the KeyRing key that sealed it; box is the 12-byte random
// nonce followed by the AES-256-GCM ciphertext and tag. The associated
// data binds the value to where it belongs: the format version, the part
// of the job ("payload", "result", "metadata:<name>"), the key ID and the
// job it was sealed for (to), so a value copied into another job, or from
// a job's payload to its result, does not open. "to" says which of the
// job's names that is: "job" its own ID (payloads, results, Then jobs),
// "parent" its Parent's ID (FollowUp jobs, whose IDs the store picks when
// the parent ends), "schedule" its periodic schedule's name (the template
// Admin.TriggerSchedule inserts with an ID of its own).

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
)

// SealError is the error of a sealed value that could not be opened.
// Its text names the key ID and never holds the value.
type SealError struct {
	// KeyID is the key the value names ("" if the envelope is unreadable).
	KeyID string
	// Part is what was opened: "payload", "result" or "metadata:<name>".
	Part string
	// Err is ErrKeyMissing or ErrSealBroken.
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
	sealVersion = 1
	sealPrefix  = `{"ax_sealed":1,`
	partPayload = "payload"
	partResult  = "result"
	nonceSize   = 12
)

// envelope is a sealed value's JSON form.
type envelope struct {
	Sealed int    `json:"ax_sealed"`
	Key    string `json:"key"`
	To     string `json:"to"`
	Box    string `json:"box"`
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

// associatedData is what a sealed value is authenticated with besides its
// ciphertext.
func associatedData(part, to, keyID, ref string) []byte {
	b := make([]byte, 0, 16+len(part)+len(to)+len(keyID)+len(ref))
	b = append(b, "ax-sealed-1\x00"...)
	b = append(b, part...)
	b = append(b, 0)
	b = append(b, to...)
	b = append(b, 0)
	b = append(b, keyID...)
	b = append(b, 0)
	return append(b, ref...)
}

// seal returns plain sealed with the current key for part of the job ref
// names (to: bindJob, bindParent or bindSchedule).
func (r *KeyRing) seal(plain []byte, part, to, ref string) ([]byte, error) {
	aead := r.aeads[r.current]
	buf := make([]byte, nonceSize, nonceSize+len(plain)+aead.Overhead())
	if _, err := rand.Read(buf); err != nil {
		return nil, fmt.Errorf("seal %s: nonce: %w", part, err)
	}
	box := aead.Seal(buf, buf, plain, associatedData(part, to, r.current, ref))
	enc := base64.StdEncoding
	out := make([]byte, 0, len(sealPrefix)+len(r.current)+len(to)+enc.EncodedLen(len(box))+32) // +32: the quotes, names and braces
	out = append(out, sealPrefix...)
	out = append(out, `"key":"`...)
	out = append(out, r.current...)
	out = append(out, `","to":"`...)
	out = append(out, to...)
	out = append(out, `","box":"`...)
	out = enc.AppendEncode(out, box)
	return append(out, `"}`...), nil
}

// open returns the plain value of sealed, which is part of the job refs
// names. r may be nil (no key ring): every sealed value then fails with
// ErrKeyMissing.
func (r *KeyRing) open(sealed []byte, part string, refs sealRefs) ([]byte, error) {
	env, ok := parseEnvelope(sealed)
	if !ok {
		return nil, &SealError{Part: part, Err: ErrSealBroken}
	}
	if r == nil || !r.Has(env.Key) {
		return nil, &SealError{KeyID: env.Key, Part: part, Err: ErrKeyMissing}
	}
	ref, ok := refs.ref(env.To)
	box := make([]byte, base64.StdEncoding.DecodedLen(len(env.Box)))
	n, err := base64.StdEncoding.Decode(box, []byte(env.Box))
	box = box[:n]
	if !ok || err != nil || len(box) < nonceSize {
		return nil, &SealError{KeyID: env.Key, Part: part, Err: ErrSealBroken}
	}
	// Opened in place: the plain value takes the ciphertext's bytes.
	plain, err := r.aeads[env.Key].Open(box[nonceSize:nonceSize], box[:nonceSize], box[nonceSize:], associatedData(part, env.To, env.Key, ref))
	if err != nil {
		return nil, &SealError{KeyID: env.Key, Part: part, Err: ErrSealBroken}
	}
	return plain, nil
}

// parseEnvelope reads a sealed value: the form seal writes at once,
// anything else (a value a JSON tool reformatted) through encoding/json.
func parseEnvelope(b []byte) (envelope, bool) {
	if env, ok := parseCanonical(b); ok {
		return env, true
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil || env.Sealed != sealVersion || env.Key == "" {
		return envelope{}, false
	}
	return env, true
}

// parseCanonical reads the envelope as seal writes it:
// {"ax_sealed":1,"key":"K","to":"T","box":"B"}, none of K, T and B
// holding a quote or a backslash.
func parseCanonical(b []byte) (envelope, bool) {
	env := envelope{Sealed: sealVersion}
	rest, ok := bytes.CutPrefix(b, []byte(sealPrefix+`"key":"`))
	if !ok {
		return env, false
	}
	for _, f := range []struct {
		dst  *string
		next string
	}{{&env.Key, `","to":"`}, {&env.To, `","box":"`}, {&env.Box, `"}`}} {
		i := bytes.IndexByte(rest, '"')
		if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 || !bytes.HasPrefix(rest[i:], []byte(f.next)) {
			return env, false
		}
		*f.dst, rest = string(rest[:i]), rest[i+len(f.next):]
	}
	return env, len(rest) == 0 && env.Key != ""
}

// IsSealed reports whether a payload, result or metadata value is sealed
// (see Config.Keys). Tools without the key ring show such values as
// encrypted.
func IsSealed[T []byte | json.RawMessage | string](v T) bool {
	b := bytes.TrimLeft([]byte(v), " \t\r\n")
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"ax_sealed"`)) {
		return false
	}
	_, ok := parseEnvelope(b)
	return ok
}

// SealedKeyID returns the ID of the key that sealed v, or "" for a value
// that is not sealed.
func SealedKeyID[T []byte | json.RawMessage | string](v T) string {
	b := bytes.TrimLeft([]byte(v), " \t\r\n")
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"ax_sealed"`)) {
		return ""
	}
	env, _ := parseEnvelope(b)
	return env.Key
}

// mightBeSealed is IsSealed's cheap first test, for hot paths: a sealed
// value starts with sealPrefix (seal writes it so, and every store keeps
// payloads, results and metadata strings byte for byte).
func mightBeSealed(b []byte) bool { return bytes.HasPrefix(b, []byte(sealPrefix)) }

// metadataPart is the part name of the metadata value name.
func metadataPart(name string) string { return "metadata:" + name }

// sealedString reports, cheaply, whether a metadata value is sealed.
func sealedString(v string) bool { return strings.HasPrefix(v, sealPrefix) }
