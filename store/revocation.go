package store

import (
	"context"
	"fmt"
	"time"
)

// MaxRevocationNames is the most names one Revocations call looks up.
const MaxRevocationNames = 100

// RevocationKeeper is implemented by stores that remember revocations for
// a while, shared by every process on the store: the HTTP dashboard
// (axhttp) records there the sessions that logged out and the keys whose
// sessions were all revoked, so that every server on the store refuses
// them at once.
//
// A revocation is a name (a non-empty text of at most MaxNonceLength
// bytes) with an expiry; it is forgotten once expired (the store may
// delete it lazily). Revoking a name does not make RememberNonce of the
// same string stale, nor the reverse; but a store may keep both in one
// table (pgstore and sqlitestore keep a revocation as the nonce
// "revoked:" + name), so a caller of both should not use nonces that
// begin with "revoked:" (axhttp's nonces begin with a key ID and ':',
// and its revocation names contain '/', which its nonces do not).
type RevocationKeeper interface {
	// Revoke records name until expiresAt. A name already recorded keeps
	// the later of its two expiries. An invalid name or expiry fails with
	// an error wrapping ErrInvalidParams.
	Revoke(ctx context.Context, name string, expiresAt time.Time) error
	// Revocations returns the expiry of each of names that is recorded
	// and not yet expired (store clock); names not recorded are absent
	// from the map. More than MaxRevocationNames names, or an invalid
	// one, fail with an error wrapping ErrInvalidParams.
	Revocations(ctx context.Context, names []string) (map[string]time.Time, error)
}

// CheckRevocation reports why name and expiresAt cannot be a revocation
// (see RevocationKeeper), wrapping ErrInvalidParams, or nil.
func CheckRevocation(name string, expiresAt time.Time) error {
	if err := CheckRevocationNames([]string{name}); err != nil {
		return err
	}
	if err := CheckTime(expiresAt); err != nil {
		return fmt.Errorf("%w: revocation expiry: %w", ErrInvalidParams, err)
	}
	return nil
}

// CheckRevocationNames reports why names cannot be looked up with
// RevocationKeeper.Revocations, wrapping ErrInvalidParams, or nil.
func CheckRevocationNames(names []string) error {
	if len(names) > MaxRevocationNames {
		return fmt.Errorf("%w: %d revocation names, more than %d", ErrInvalidParams, len(names), MaxRevocationNames)
	}
	for _, n := range names {
		if n == "" {
			return fmt.Errorf("%w: empty revocation name", ErrInvalidParams)
		}
		if err := CheckText(n, MaxNonceLength); err != nil {
			return fmt.Errorf("%w: revocation name: %w", ErrInvalidParams, err)
		}
	}
	return nil
}
