package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// revocationPrefix sets revocations apart from nonces in the nonces
// table, which keeps both (no table of their own, so no migration): a
// revocation is the row "revoked:" + name. RememberNonce's clean-up
// deletes expired revocations like expired nonces.
const revocationPrefix = "revoked:"

// Revoke records name until expiresAt, keeping the later expiry of a
// name already recorded; see store.RevocationKeeper. An invalid name or
// expiry fails with an error wrapping store.ErrInvalidParams.
func (s *Store) Revoke(ctx context.Context, name string, expiresAt time.Time) error {
	if err := store.CheckRevocation(name, expiresAt); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(qRevoke, revocationPrefix+name, toUS(expiresAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	return nil
}

// Revocations returns the expiry of each of names recorded and not yet
// expired (store clock); see store.RevocationKeeper.
func (s *Store) Revocations(ctx context.Context, names []string) (map[string]time.Time, error) {
	if err := store.CheckRevocationNames(names); err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	out := make(map[string]time.Time)
	if len(names) == 0 {
		return out, nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = revocationPrefix + n
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	err = s.read(ctx, false, func(r *rtx) error {
		rows, err := r.query(qRevocations, string(list), toUS(s.clock()))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			var exp int64
			if err := rows.Scan(&key, &exp); err != nil {
				return err
			}
			out[key[len(revocationPrefix):]] = fromUS(exp)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	return out, nil
}
