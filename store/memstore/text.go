package memstore

import (
	"fmt"

	"github.com/axsched/ax/store"
)

// checkTexts reports, wrapping store.ErrInvalidParams, the first of texts
// that a database could not keep (store.CheckText: invalid UTF-8 or a NUL
// byte), or nil. The params' Validate methods check the texts of jobs,
// claim owners and nodes; this covers the names they leave out (the kinds
// of a claim, leadership names and holders, periodic schedule names and
// specs, node names to stop, the kind filter of List), so that memstore
// refuses what PostgreSQL refuses rather than answering calls another
// Store would fail.
func checkTexts(texts ...string) error {
	for _, s := range texts {
		if err := store.CheckText(s, 0); err != nil {
			return fmt.Errorf("%w: text %q: %w", store.ErrInvalidParams, s, err)
		}
	}
	return nil
}
