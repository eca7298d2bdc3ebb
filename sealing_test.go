package ax

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

func testKey(t *testing.T, id string) Key {
	t.Helper()
	k, err := GenerateKey(id)
	require.NoError(t, err)
	return k
}

func TestSealOpen(t *testing.T) {
	k1, k2 := testKey(t, "k1"), testKey(t, "k2")
	ring, err := NewKeyRing(k2, k1)
	require.NoError(t, err)
	old, err := NewKeyRing(k1)
	require.NoError(t, err)
	other, err := NewKeyRing(testKey(t, "k2")) // same ID, another secret
	require.NoError(t, err)
	job, job2, parent := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	plain := []byte(`{"email":"ada@example.com"}`)
	refs := sealRefs{job: job, parent: parent, schedule: "nightly"}

	flip := func(sealed []byte) []byte {
		var env envelope
		require.NoError(t, json.Unmarshal(sealed, &env))
		box := make([]byte, box85DecodedLen(len(env.Box)))
		require.True(t, box85Decode(box, []byte(env.Box)))
		box[len(box)/2] ^= 1
		enc := make([]byte, box85EncodedLen(len(box)))
		box85Encode(enc, box)
		env.Box = string(enc)
		b, _ := json.Marshal(env)
		return b
	}
	// asV1 relabels a version-2 value as version 1, its box in base64:
	// the version is authenticated, so it must not open.
	asV1 := func(sealed []byte) []byte {
		var env envelope
		require.NoError(t, json.Unmarshal(sealed, &env))
		box := make([]byte, box85DecodedLen(len(env.Box)))
		require.True(t, box85Decode(box, []byte(env.Box)))
		env.Sealed, env.Box = 1, base64.StdEncoding.EncodeToString(box)
		b, _ := json.Marshal(env)
		return b
	}
	cases := []struct {
		name     string
		sealWith *KeyRing
		to, ref  string
		mangle   func([]byte) []byte
		openWith *KeyRing
		part     string
		refs     sealRefs
		wantErr  error
		wantKey  string
	}{
		{"RoundTrip", ring, bindJob, string(job[:]), nil, ring, partPayload, refs, nil, "k2"},
		{"OldKeyOpens", old, bindJob, string(job[:]), nil, ring, partPayload, refs, nil, "k1"},
		{"BoundToParent", ring, bindParent, string(parent[:]), nil, ring, partPayload, sealRefs{job: job2, parent: parent}, nil, "k2"},
		{"BoundToSchedule", ring, bindSchedule, "nightly", nil, ring, partPayload, sealRefs{job: job2, schedule: "nightly"}, nil, "k2"},
		{"OtherJob", ring, bindJob, string(job[:]), nil, ring, partPayload, sealRefs{job: job2}, ErrSealBroken, "k2"},
		{"OtherParent", ring, bindParent, string(parent[:]), nil, ring, partPayload, sealRefs{job: job, parent: job2}, ErrSealBroken, "k2"},
		{"OtherSchedule", ring, bindSchedule, "nightly", nil, ring, partPayload, sealRefs{schedule: "hourly"}, ErrSealBroken, "k2"},
		{"NoParent", ring, bindParent, string(parent[:]), nil, ring, partPayload, sealRefs{job: job}, ErrSealBroken, "k2"},
		{"PayloadAsResult", ring, bindJob, string(job[:]), nil, ring, partResult, refs, ErrSealBroken, "k2"},
		{"FlippedByte", ring, bindJob, string(job[:]), flip, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"BindingChanged", ring, bindJob, string(job[:]), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"to":"job"`), []byte(`"to":"parent"`), 1)
		}, ring, partPayload, sealRefs{job: job, parent: job}, ErrSealBroken, "k2"},
		{"KeyIDChanged", ring, bindJob, string(job[:]), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"key":"k2"`), []byte(`"key":"k1"`), 1)
		}, ring, partPayload, refs, ErrSealBroken, "k1"},
		{"Truncated", ring, bindJob, string(job[:]), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"box":"`), []byte(`"box":"AAAA`), 1)[:len(b)-10]
		}, ring, partPayload, refs, ErrSealBroken, ""},
		{"ShortBox", ring, bindJob, string(job[:]), func([]byte) []byte {
			return []byte(`{"ax_sealed":2,"key":"k2","to":"job","box":"AAAA"}`)
		}, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"ShortBoxV1", ring, bindJob, string(job[:]), func([]byte) []byte {
			return []byte(`{"ax_sealed":1,"key":"k2","to":"job","box":"AAAA"}`)
		}, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"NotBase85", ring, bindJob, string(job[:]), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"box":"`), []byte(`"box":"'`), 1)
		}, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"RelabeledV1", ring, bindJob, string(job[:]), asV1, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"ReformattedByTool", ring, bindJob, string(job[:]), func(b []byte) []byte {
			var env map[string]any
			require.NoError(t, json.Unmarshal(b, &env))
			out, err := json.MarshalIndent(env, "", "  ")
			require.NoError(t, err)
			return out
		}, ring, partPayload, refs, nil, "k2"},
		{"UnknownBinding", ring, bindJob, string(job[:]), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"to":"job"`), []byte(`"to":"kind"`), 1)
		}, ring, partPayload, refs, ErrSealBroken, "k2"},
		{"KeyMissing", ring, bindJob, string(job[:]), nil, old, partPayload, refs, ErrKeyMissing, "k2"},
		{"NoRing", ring, bindJob, string(job[:]), nil, nil, partPayload, refs, ErrKeyMissing, "k2"},
		{"SameIDOtherSecret", ring, bindJob, string(job[:]), nil, other, partPayload, refs, ErrSealBroken, "k2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sealed, err := c.sealWith.seal(plain, partPayload, c.to, c.ref)
			require.NoError(t, err)
			require.True(t, json.Valid(sealed), "%s", sealed)
			require.True(t, IsSealed(sealed))
			require.True(t, mightBeSealed(sealed))
			require.NotContains(t, string(sealed), "ada@")
			if c.mangle != nil {
				sealed = c.mangle(sealed)
			}
			got, err := c.openWith.open(sealed, c.part, c.refs)
			if c.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, plain, got)
				return
			}
			require.ErrorIs(t, err, c.wantErr)
			var se *SealError
			require.True(t, errors.As(err, &se))
			require.Equal(t, c.wantKey, se.KeyID)
			require.Contains(t, err.Error(), `"`+c.wantKey+`"`)
			require.NotContains(t, err.Error(), "ada@")
		})
	}
}

// TestOpenVersion1 opens values sealed by the version-1 format (base64
// box), written by ax before the version-2 envelope: stored jobs keep
// running after an upgrade. The vectors were made by that code with the
// key below (bytes 0 to 31).
func TestOpenVersion1(t *testing.T) {
	secret := make([]byte, KeyLength)
	for i := range secret {
		secret[i] = byte(i)
	}
	ring, err := NewKeyRing(Key{ID: "2026-11", Secret: secret})
	require.NoError(t, err)
	id := uuid.MustParse("0193a000-0000-7000-8000-000000000001")
	for _, c := range []struct {
		name, sealed, part, plain string
		refs                      sealRefs
	}{
		{"Payload", `{"ax_sealed":1,"key":"2026-11","to":"job","box":"yGBATg7XKY9SGqfPRvlbODmjTUtRjaLdX9US+neJw8vPa9JX3QLxIVc4//LUWMpHkPJMwFGE7Q=="}`,
			partPayload, `{"email":"ada@example.com"}`, sealRefs{job: id}},
		{"Result", `{"ax_sealed":1,"key":"2026-11","to":"job","box":"ihPIGd/R3PCd4PKfjzE0Yio6OIDHnapxQXk+pDYBPYtXYc0mWaN/"}`,
			partResult, `{"ok":true}`, sealRefs{job: id}},
		{"ScheduleMetadata", `{"ax_sealed":1,"key":"2026-11","to":"schedule","box":"Bk14qNsO2Go3UP7igICoCOEFP6dzrUKpcfAzkqK0ifb0LQA="}`,
			metadataPart("tok"), `tok-123`, sealRefs{schedule: "nightly"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.True(t, IsSealed(c.sealed))
			require.True(t, mightBeSealed([]byte(c.sealed)))
			require.True(t, sealedString(c.sealed))
			require.Equal(t, "2026-11", SealedKeyID(c.sealed))
			got, err := ring.open([]byte(c.sealed), c.part, c.refs)
			require.NoError(t, err)
			require.Equal(t, c.plain, string(got))
			_, err = ring.open([]byte(c.sealed), c.part, sealRefs{job: uuid.Must(uuid.NewV7()), schedule: "other"})
			require.ErrorIs(t, err, ErrSealBroken)
			// As version 2 (same box, base 85), it does not open either.
			v2, ok := parseCanonical([]byte(c.sealed))
			require.True(t, ok)
			box, ok := decodeBox(nil, v2)
			require.True(t, ok)
			enc := make([]byte, box85EncodedLen(len(box)))
			box85Encode(enc, box)
			relabeled := `{"ax_sealed":2,"key":"2026-11","to":"` + string(v2.to) + `","box":"` + string(enc) + `"}`
			_, err = ring.open([]byte(relabeled), c.part, c.refs)
			require.ErrorIs(t, err, ErrSealBroken)
			// Re-sealing writes the ring's version: EnvelopeV1 (2) by default.
			again, err := ring.reseal([]byte(c.sealed), c.part, c.refs)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(again, []byte(`{"ax_sealed":2,`)), "%s", again)
			got, err = ring.open(again, c.part, c.refs)
			require.NoError(t, err)
			require.Equal(t, c.plain, string(got))
		})
	}
}

// TestSealSize pins the envelope's length: the header, and the box at 5
// characters per 4 bytes.
func TestSealSize(t *testing.T) {
	ring, err := NewKeyRing(testKey(t, "2026-12"))
	require.NoError(t, err)
	ring, err = ring.WithEnvelopeVersion(EnvelopeV3)
	require.NoError(t, err)
	for _, n := range []int{0, 1, 2, 3, 4, 5, 27, 1024, 4096} {
		plain := bytes.Repeat([]byte("x"), n)
		sealed, err := ring.seal(plain, partPayload, bindJob, "x")
		require.NoError(t, err)
		box := saltSize + n + 16
		want := len(`{"ax_sealed":3,"key":"2026-12","to":"job","box":""}`) + box85EncodedLen(box)
		require.Len(t, sealed, want, "n=%d", n)
		require.True(t, json.Valid(sealed), "%s", sealed)
		got, err := ring.open(sealed, partPayload, sealRefs{schedule: "x", job: uuid.Nil})
		require.ErrorIs(t, err, ErrSealBroken) // bound to a job, and refs name none
		require.Nil(t, got)
	}
}

// TestOpenLaterFormat: a value sealed in a format this code does not know
// (by a newer release, during a rolling upgrade) is sealed for every
// check, hot paths included, and fails with ErrSealFormat naming its key:
// never handed over as a plain value.
func TestOpenLaterFormat(t *testing.T) {
	ring, err := NewKeyRing(testKey(t, "k"))
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	for _, v := range []string{
		`{"ax_sealed":4,"key":"k","to":"job","box":"0000000000000000000000000"}`,
		`{"ax_sealed":4,"key":"k","to":"job","box":"0000000000000000000000000","aad":"x"}`, // and new fields
	} {
		require.True(t, mightBeSealed([]byte(v)), v)
		require.True(t, sealedString(v), v)
		require.True(t, IsSealed(v), v)
		job := &Job{ID: id, Payload: json.RawMessage(v)}
		require.True(t, hasSealed(job), v)
		err := openJob(ring, job)
		require.ErrorIs(t, err, ErrSealFormat, v)
		var se *SealError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "k", se.KeyID)
		require.Equal(t, v, string(job.Payload), "left as stored")
	}
	// Reformatted by a JSON tool: IsSealed and open still tell (the hot
	// paths see values as the stores keep them, byte for byte).
	reformatted := `{"key":"k","ax_sealed":17}`
	require.True(t, IsSealed(reformatted))
	_, err = ring.open([]byte(reformatted), partPayload, sealRefs{job: id})
	require.ErrorIs(t, err, ErrSealFormat)
	// Not envelopes: a plain payload that merely starts alike stays plain.
	for _, v := range []string{`{"ax_sealed":true}`, `{"ax_sealed":0,"key":"k"}`, `{"ax_sealed": 2}`} {
		require.False(t, mightBeSealed([]byte(v)), v)
	}
}

func TestSealFreshNonce(t *testing.T) {
	ring, err := NewKeyRing(testKey(t, "k"))
	require.NoError(t, err)
	a, err := ring.seal([]byte(`1`), partPayload, bindJob, "x")
	require.NoError(t, err)
	b, err := ring.seal([]byte(`1`), partPayload, bindJob, "x")
	require.NoError(t, err)
	require.NotEqual(t, string(a), string(b), "two seals of one value must differ (random nonce)")
}

// TestIsSealed: sealed values, whatever their version and however a JSON
// tool reformatted them, are sealed; a plain value that merely looks like
// one is not, so that tools without the ring show its content instead of
// "encrypted" (the HTTP trial found such a payload hidden).
func TestIsSealed(t *testing.T) {
	ring, err := NewKeyRing(testKey(t, "k"))
	require.NoError(t, err)
	v3, err := ring.seal([]byte(`{"a":1}`), partPayload, bindJob, "x")
	require.NoError(t, err)
	old, err := ring.WithEnvelopeVersion(EnvelopeV1)
	require.NoError(t, err)
	v2, err := old.seal([]byte(`{"a":1}`), partPayload, bindParent, "x")
	require.NoError(t, err)
	var env envelope
	require.NoError(t, json.Unmarshal(v3, &env))
	reformatted, err := json.MarshalIndent(map[string]any{"box": env.Box, "to": env.To, "key": env.Key, "ax_sealed": env.Sealed}, " ", "  ")
	require.NoError(t, err)
	v1 := `{"ax_sealed":1,"key":"2026-11","to":"job","box":"ihPIGd/R3PCd4PKfjzE0Yio6OIDHnapxQXk+pDYBPYtXYc0mWaN/"}`
	for _, c := range []struct {
		v    string
		want bool
	}{
		{string(v3), true},
		{string(v2), true},
		{v1, true},
		{" " + string(reformatted), true}, // reformatted by a JSON tool
		{`{"ax_sealed":4,"key":"k","to":"job","box":"AAAA"}`, true},  // a later format: sealed, refused by open
		{`{"ax_sealed":12,"key":"k","future":"x"}`, true},            // whatever its members
		{`{"ax_sealed":1,"key":"k","to":"job","box":"AAAA"}`, false}, // box too short for a nonce and a tag
		{`{"ax_sealed":3,"key":"k","to":"job","box":"` + env.Box[:30] + `"}`, false},
		{`{"ax_sealed":3,"key":"k","to":"anywhere","box":"` + env.Box + `"}`, false},
		{`{"ax_sealed":3,"key":"k k","to":"job","box":"` + env.Box + `"}`, false},
		{`{"ax_sealed":3,"key":"k","to":"job","box":"` + env.Box + `","note":"mine"}`, false},
		{`{"ax_sealed":1,"key":"k","note":"my own payload, not encrypted"}`, false},
		{`{"ax_sealed":2,"key":"k","to":"job","box":"` + env.Box[:len(env.Box)-5] + `,,,,,"}`, false}, // not base 85
		{`{"ax_sealed":0,"key":"k","to":"job","box":"AAAA"}`, false},
		{`{"ax_sealed":02,"key":"k","to":"job","box":"AAAA"}`, false},
		{`{"ax_sealed":true,"key":"k"}`, false},
		{`{"ax_sealed":1}`, false},
		{`{"email":"ax_sealed"}`, false},
		{`"{\"ax_sealed\":1}"`, false},
		{`null`, false},
		{``, false},
	} {
		require.Equal(t, c.want, IsSealed(c.v), c.v)
		require.Equal(t, c.want, IsSealed([]byte(c.v)), c.v)
	}
	require.Equal(t, "k", SealedKeyID(v3))
	require.Equal(t, "k", SealedKeyID(string(v2)))
	require.Equal(t, "2026-11", SealedKeyID(v1))
	require.Equal(t, "", SealedKeyID(`{"ax_sealed":1,"key":"k","note":"my own payload, not encrypted"}`))
	require.Equal(t, "", SealedKeyID(`{"a":1}`))
	// A host with a ring does not wait for the key of a lookalike stored
	// plain (a host without the ring stored it): it can never open.
	_, err = ring.open([]byte(`{"ax_sealed":1,"key":"k9","note":"my own payload"}`), partPayload, sealRefs{job: uuid.Must(uuid.NewV7())})
	require.ErrorIs(t, err, ErrSealBroken)
}

func TestKeyRing(t *testing.T) {
	k1, k2 := testKey(t, "2026-11"), testKey(t, "2026-12")
	cases := []struct {
		name    string
		current Key
		older   []Key
		wantErr string
	}{
		{"One", k1, nil, ""},
		{"Two", k2, []Key{k1}, ""},
		{"ShortSecret", Key{ID: "a", Secret: make([]byte, 16)}, nil, "16 bytes"},
		{"EmptyID", Key{Secret: k1.Secret}, nil, "1 to 64"},
		{"LongID", Key{ID: strings.Repeat("a", 65), Secret: k1.Secret}, nil, "1 to 64"},
		{"BadID", Key{ID: `a"b`, Secret: k1.Secret}, nil, "only letters"},
		{"Duplicate", k1, []Key{k2, {ID: k1.ID, Secret: k2.Secret}}, "given twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewKeyRing(c.current, c.older...)
			if c.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalidKey)
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.current.ID, r.Current())
			require.Len(t, r.IDs(), 1+len(c.older))
			file, err := MarshalKeyRing(c.current, c.older...)
			require.NoError(t, err)
			back, err := ParseKeyRing(file)
			require.NoError(t, err)
			require.Equal(t, r.IDs(), back.IDs())
			sealed, err := r.seal([]byte(`7`), partPayload, bindJob, "x")
			require.NoError(t, err)
			plain, err := back.open(sealed, partPayload, sealRefs{job: uuid.Nil, schedule: "x"})
			require.ErrorIs(t, err, ErrSealBroken, "bound to a job, not a schedule")
			require.Nil(t, plain)
		})
	}
}

func TestParseKeyRing(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString(make([]byte, KeyLength))
	for _, c := range []struct {
		name, file, wantErr string
	}{
		{"OK", `{"current":"a","keys":[{"id":"a","secret":"` + secret + `"},{"id":"b","secret":"` + secret + `"}]}`, ""},
		{"NotJSON", `current=a`, "not a JSON object"},
		{"NoCurrent", `{"current":"c","keys":[{"id":"a","secret":"` + secret + `"}]}`, `current key "c"`},
		{"BadBase64", `{"current":"a","keys":[{"id":"a","secret":"%%%"}]}`, "not standard base64"},
		{"ShortSecret", `{"current":"a","keys":[{"id":"a","secret":"AAAA"}]}`, "3 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseKeyRing([]byte(c.file))
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidKey)
			require.ErrorContains(t, err, c.wantErr)
			require.NotContains(t, err.Error(), secret)
		})
	}
}

// TestSealPerValueKey: version 3 seals each value with a key of its own,
// derived from the ring's key and the value's 192-bit salt with
// HKDF-SHA256 (an all-zero nonce: the key seals one value), so GCM's limit on values per key (2^32 with random
// 96-bit nonces, about 29 hours at 41,083 jobs/s) does not bind the
// ring's key. The test derives the key from the envelope alone, as the
// format says, and checks that the ring's key does not open the box. The
// code before sealed with the ring's key and a random nonce (version 2).
func TestSealPerValueKey(t *testing.T) {
	key := testKey(t, "k")
	ring, err := NewKeyRing(key)
	require.NoError(t, err)
	ring, err = ring.WithEnvelopeVersion(EnvelopeV3)
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	plain := []byte(`{"email":"ada@example.com"}`)
	sealed, err := ring.seal(plain, partPayload, bindJob, string(id[:]))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(sealed, []byte(`{"ax_sealed":3,`)), "%s", sealed)
	env, ok := parseCanonical(sealed)
	require.True(t, ok)
	box, ok := decodeBox(nil, env)
	require.True(t, ok)
	require.Len(t, box, 24+len(plain)+16, "a 24-byte salt, the ciphertext, the tag")
	salt, ct := box[:24], box[24:]
	// HKDF-Expand with the ring key as the pseudorandom key.
	derived, err := hkdf.Expand(sha256.New, key.Secret, "ax-sealed-3 aes-256-gcm key\x00"+string(salt), 32)
	require.NoError(t, err)
	aad := associatedData(3, partPayload, "job", "k", string(id[:]))
	block, err := aes.NewCipher(derived)
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	got, err := gcm.Open(nil, make([]byte, 12), ct, aad)
	require.NoError(t, err, "the derived key opens the value")
	require.Equal(t, plain, got)
	// The ring's own key does not, with any nonce the box holds.
	block, err = aes.NewCipher(key.Secret)
	require.NoError(t, err)
	gcm, err = cipher.NewGCM(block)
	require.NoError(t, err)
	_, err = gcm.Open(nil, box[:12], box[12:], aad)
	require.Error(t, err)
	// Two seals of one value draw two salts.
	again, err := ring.seal(plain, partPayload, bindJob, string(id[:]))
	require.NoError(t, err)
	env2, _ := parseCanonical(again)
	box2, _ := decodeBox(nil, env2)
	require.NotEqual(t, salt, box2[:24])
}

// TestOpenVersion2: values sealed by v1.0 (envelope version 2: the ring's
// key and a random nonce, the box in base 85) open, and a ring told to
// write version 2 (WithEnvelopeVersion, for a rolling upgrade from v1.0)
// writes what v1.0 reads, which every ring opens. The vectors were made
// by v1.0's code with the key below (bytes 0 to 31).
func TestOpenVersion2(t *testing.T) {
	secret := make([]byte, KeyLength)
	for i := range secret {
		secret[i] = byte(i)
	}
	ring, err := NewKeyRing(Key{ID: "2026-11", Secret: secret})
	require.NoError(t, err)
	id := uuid.MustParse("0193a000-0000-7000-8000-000000000001")
	for _, c := range []struct {
		name, sealed, part, plain string
		refs                      sealRefs
	}{
		{"Payload", `{"ax_sealed":2,"key":"2026-11","to":"job","box":"FBB(%jlF1}BNehDMPof{uRr-PF9xDhl|@D{*Wi*HzQf2fKdjZ}.[Yp16^B$$Dvlo%QSW+"}`,
			partPayload, `{"email":"ada@example.com"}`, sealRefs{job: id}},
		{"Result", `{"ax_sealed":2,"key":"2026-11","to":"job","box":"acVv~)Xn2fhAC%zWyfL:bJ@CkI%twZ=|U/MC|Cyg?eYVV5{pj"}`,
			partResult, `{"ok":true}`, sealRefs{job: id}},
		{"ScheduleMetadata", `{"ax_sealed":2,"key":"2026-11","to":"schedule","box":"bhAf3t)KFmX%=w*w$-UtTxWV:fg-~PQR[s7_1z?hh6?m"}`,
			metadataPart("tok"), `tok-123`, sealRefs{schedule: "nightly"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ring.open([]byte(c.sealed), c.part, c.refs)
			require.NoError(t, err)
			require.Equal(t, c.plain, string(got))
			// Relabeled as version 3 it does not open.
			relabeled := bytes.Replace([]byte(c.sealed), []byte(`"ax_sealed":2`), []byte(`"ax_sealed":3`), 1)
			_, err = ring.open(relabeled, c.part, c.refs)
			require.ErrorIs(t, err, ErrSealBroken)
		})
	}
	require.Equal(t, 2, ring.EnvelopeVersion(), "EnvelopeV1 is the default: every v1 release reads it")
	v3, err := ring.WithEnvelopeVersion(EnvelopeV3)
	require.NoError(t, err)
	require.Equal(t, 3, v3.EnvelopeVersion())
	require.Equal(t, 2, ring.EnvelopeVersion(), "the copy leaves the ring as it was")
	v1, err := v3.WithEnvelopeVersion(EnvelopeV1)
	require.NoError(t, err)
	require.Equal(t, 2, v1.EnvelopeVersion())
	sealed, err := v1.seal([]byte(`{"ok":true}`), partResult, bindJob, string(id[:]))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(sealed, []byte(`{"ax_sealed":2,"key":"2026-11",`)), "%s", sealed)
	got, err := ring.open(sealed, partResult, sealRefs{job: id})
	require.NoError(t, err)
	require.Equal(t, `{"ok":true}`, string(got))
	for _, bad := range []int{0, 1, 4} {
		_, err := ring.WithEnvelopeVersion(bad)
		require.ErrorIs(t, err, ErrInvalidKey, "version %d", bad)
	}
	// A ring file says it with "envelope".
	file := fmt.Sprintf(`{"current":"2026-11","keys":[{"id":"2026-11","secret":%q}],"envelope":2}`, base64.StdEncoding.EncodeToString(secret))
	fromFile, err := ParseKeyRing([]byte(file))
	require.NoError(t, err)
	require.Equal(t, 2, fromFile.EnvelopeVersion())
	_, err = ParseKeyRing([]byte(strings.Replace(file, `"envelope":2`, `"envelope":9`, 1)))
	require.ErrorIs(t, err, ErrInvalidKey)
}

// TestCallOpenedLeavesOrFails: callOpened leaves a job it cannot open but
// another host may (its key not in this ring, no ring, a newer envelope
// format: a rolling deploy) for that host, as a snooze of wait that the
// outcome does not count, and fails a tampered one permanently; neither
// reaches the handler.
func TestCallOpenedLeavesOrFails(t *testing.T) {
	mine, other := testKey(t, "mine"), testKey(t, "other")
	ring, err := NewKeyRing(mine)
	require.NoError(t, err)
	otherRing, err := NewKeyRing(other)
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	sealedBy := func(r *KeyRing) json.RawMessage {
		b, err := r.seal([]byte(`{}`), partPayload, bindJob, string(id[:]))
		require.NoError(t, err)
		return b
	}
	tampered := sealedBy(ring)
	tampered[len(tampered)-4] ^= 1
	ran := false
	kind := &kindHandler{handler: HandlerFunc(func(context.Context, *Job) error { ran = true; return nil }),
		settings: handlerSettings{timeout: time.Second}}
	for _, c := range []struct {
		name    string
		keys    *KeyRing
		payload json.RawMessage
		wait    bool
		is      error
	}{
		{"KeyNotInRing", ring, sealedBy(otherRing), true, ErrKeyMissing},
		{"NoRing", nil, sealedBy(ring), true, ErrKeyMissing},
		{"NewerFormat", ring, json.RawMessage(`{"ax_sealed":9,"key":"mine","to":"job","box":"00000"}`), true, ErrSealFormat},
		{"Tampered", ring, tampered, false, ErrSealBroken},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &attempt{job: &Job{ID: id, Kind: "k", Payload: c.payload, Attempt: 1, MaxAttempts: 1}, kind: kind}
			err := callOpened(t.Context(), a, c.keys, 7*time.Second)
			require.ErrorIs(t, err, c.is)
			require.Equal(t, c.wait, keyWait(err))
			p := outcome(a, err, nil)
			if c.wait {
				require.Equal(t, store.OutcomeSnooze, p.Outcome, "left for another host, the attempt not counted")
				require.Equal(t, 7*time.Second, p.Delay)
			} else {
				require.Equal(t, store.OutcomeDead, p.Outcome)
			}
			require.False(t, ran)
		})
	}
}
