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

// The statements are not among the Store's prepared ones: a logout or a
// dashboard page runs them, seldom enough to parse them each time.
const (
	// revokeSQL records a revocation, keeping the later expiry of a row
	// already there.
	revokeSQL = `INSERT INTO nonces (nonce, expires_at) VALUES (?, ?)
	ON CONFLICT (nonce) DO UPDATE SET expires_at = max(nonces.expires_at, excluded.expires_at)`
	// revocationsSQL reads the unexpired revocations of a JSON array of
	// names, through the primary key.
	revocationsSQL = `SELECT nonce, expires_at FROM nonces WHERE nonce IN (SELECT value FROM json_each(?)) AND expires_at > ?`
)

// Revoke records name until expiresAt, keeping the later expiry of a
// name already recorded; see store.RevocationKeeper. An invalid name or
// expiry fails with an error wrapping store.ErrInvalidParams.
func (s *Store) Revoke(ctx context.Context, name string, expiresAt time.Time) error {
	if err := store.CheckRevocation(name, expiresAt); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.tx.ExecContext(w.ctx, revokeSQL, revocationPrefix+name, toUS(expiresAt))
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
		rows, err := r.queryText(revocationsSQL, string(list), toUS(s.clock()))
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
