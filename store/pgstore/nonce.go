package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

var _ store.NonceKeeper = (*Store)(nil)

// nonceGCBatch is how many expired nonces each RememberNonce deletes at
// most.
const nonceGCBatch = 100

// rememberNonceSQL inserts the nonce, or takes over an expired row of the
// same nonce, returning a row only then (fresh). Concurrent callers with
// one nonce queue on its primary key, and only the first sees it fresh.
// gc deletes a few expired nonces, oldest first, skipping rows another
// caller is deleting, and never the nonce at hand (both parts see the
// same snapshot, so they must not touch the same row).
const rememberNonceSQL = `WITH gc AS (
	DELETE FROM {nonces} WHERE nonce IN (
		SELECT nonce FROM {nonces}
		WHERE expires_at <= now() AND nonce <> $1
		ORDER BY expires_at
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	)
)
INSERT INTO {nonces} AS n (nonce, expires_at) VALUES ($1, $2)
ON CONFLICT (nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at
WHERE n.expires_at <= now()
RETURNING true`

// RememberNonce records nonce until expiresAt and reports whether it was
// new: false when the same nonce is recorded and not yet expired (store
// clock); see store.NonceKeeper. It is one statement, which also deletes
// up to 100 expired nonces, oldest first, so the table stays about as
// large as the nonces alive. An empty nonce, one longer than
// store.MaxNonceLength bytes or not a storable text, or an expiresAt
// outside store.MinTime..store.MaxTime fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) RememberNonce(ctx context.Context, nonce string, expiresAt time.Time) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if nonce == "" {
		return false, fmt.Errorf("pgstore: remember nonce: %w: empty nonce", store.ErrInvalidParams)
	}
	if err := store.CheckText(nonce, store.MaxNonceLength); err != nil {
		return false, fmt.Errorf("pgstore: remember nonce: %w: %w", store.ErrInvalidParams, err)
	}
	if err := store.CheckTime(expiresAt); err != nil {
		return false, fmt.Errorf("pgstore: remember nonce: %w: expiry: %w", store.ErrInvalidParams, err)
	}
	q := replaceTable(rememberNonceSQL, "{nonces}", s.schema, "nonces")
	rows, _ := s.pool.Query(ctx, q, nonce, expiresAt, nonceGCBatch)
	fresh := false
	_, err := pgx.ForEachRow(rows, []any{&fresh}, func() error { return nil })
	if err != nil {
		return false, fmt.Errorf("pgstore: remember nonce: %w", invalidData(err))
	}
	return fresh, nil
}
