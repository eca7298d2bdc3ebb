package axhttp

import (
	"context"
	"time"

	"github.com/axsched/ax/store"
)

// StoreNonces is a NonceStore kept in the AX store (store.NonceKeeper),
// so that every API server on the store refuses a nonce any of them saw.
type StoreNonces struct {
	// Keeper is the store.
	Keeper store.NonceKeeper
}

// Remember implements NonceStore.
func (s StoreNonces) Remember(ctx context.Context, nonce string, until time.Time) (bool, error) {
	return s.Keeper.RememberNonce(ctx, nonce, until)
}

// NoncesFor returns the NonceStore for a server on st: StoreNonces when
// st implements store.NonceKeeper (shared by every server on the store),
// otherwise NewMemoryNonces(0), which serves one process only (with
// several servers, a request could then be replayed to another one
// within the window). shared reports which it is.
func NoncesFor(st store.Store) (n NonceStore, shared bool) {
	if nk, ok := st.(store.NonceKeeper); ok {
		return StoreNonces{Keeper: nk}, true
	}
	return NewMemoryNonces(0), false
}
