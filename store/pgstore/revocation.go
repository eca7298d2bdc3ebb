package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.RevocationKeeper = (*Store)(nil)

// revocationPrefix sets revocations apart from nonces in the nonces
// table, which keeps both (no table of their own, so no migration): a
// revocation is the row "revoked:" + name. RememberNonce's clean-up
// deletes expired revocations like expired nonces.
const revocationPrefix = "revoked:"

// revokeSQL records a revocation, keeping the later expiry of a row
// already there (expired or not: the later expiry is right either way).
const revokeSQL = `INSERT INTO {nonces} AS n (nonce, expires_at) VALUES ($1, $2)
ON CONFLICT (nonce) DO UPDATE SET expires_at = GREATEST(n.expires_at, EXCLUDED.expires_at)`

// revocationsSQL reads the unexpired revocations of some names, through
// the primary key.
const revocationsSQL = `SELECT nonce, expires_at FROM {nonces} WHERE nonce = ANY($1) AND expires_at > now()`

// Revoke records name until expiresAt, keeping the later expiry of a
// name already recorded; see store.RevocationKeeper. It is one upsert
// into the nonces table. An invalid name or expiry fails with an error
// wrapping store.ErrInvalidParams.
func (s *Store) Revoke(ctx context.Context, name string, expiresAt time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := store.CheckRevocation(name, expiresAt); err != nil {
		return fmt.Errorf("pgstore: revoke: %w", err)
	}
	q := replaceTable(revokeSQL, "{nonces}", s.schema, "nonces")
	if _, err := s.pool.Exec(ctx, q, revocationPrefix+name, expiresAt); err != nil {
		return fmt.Errorf("pgstore: revoke: %w", invalidData(err))
	}
	return nil
}

// Revocations returns the expiry of each of names recorded and not yet
// expired (database clock); see store.RevocationKeeper. It is one
// primary-key read.
func (s *Store) Revocations(ctx context.Context, names []string) (map[string]time.Time, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckRevocationNames(names); err != nil {
		return nil, fmt.Errorf("pgstore: revocations: %w", err)
	}
	out := make(map[string]time.Time)
	if len(names) == 0 {
		return out, nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = revocationPrefix + n
	}
	q := replaceTable(revocationsSQL, "{nonces}", s.schema, "nonces")
	rows, _ := s.pool.Query(ctx, q, keys)
	var key string
	var exp time.Time
	_, err := pgx.ForEachRow(rows, []any{&key, &exp}, func() error {
		out[key[len(revocationPrefix):]] = exp
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: revocations: %w", invalidData(err))
	}
	return out, nil
}
