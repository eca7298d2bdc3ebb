package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// RememberNonce records nonce until expiresAt, in one transaction, and
// reports whether it was new: false when the same nonce is recorded and
// not yet expired (store clock); see store.NonceKeeper. Each call also
// deletes up to 100 expired nonces, oldest first, so the table stays as
// large as the nonces alive. An empty nonce, one longer than
// store.MaxNonceLength bytes or not a storable text, or an expiresAt
// outside store.MinTime..store.MaxTime fails with an error wrapping
// store.ErrInvalidParams.
func (s *Store) RememberNonce(ctx context.Context, nonce string, expiresAt time.Time) (bool, error) {
	if nonce == "" {
		return false, fmt.Errorf("remember nonce: %w: empty nonce", store.ErrInvalidParams)
	}
	if err := store.CheckText(nonce, store.MaxNonceLength); err != nil {
		return false, fmt.Errorf("remember nonce: %w: %w", store.ErrInvalidParams, err)
	}
	if err := store.CheckTime(expiresAt); err != nil {
		return false, fmt.Errorf("remember nonce: %w: expiry: %w", store.ErrInvalidParams, err)
	}
	fresh := false
	err := s.write(ctx, func(w *wtx) error {
		now := toUS(w.now)
		if _, err := w.exec(qNonceGC, now); err != nil {
			return err
		}
		res, err := w.exec(qNoncePut, nonce, toUS(expiresAt), now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		fresh = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("remember nonce: %w", err)
	}
	return fresh, nil
}
