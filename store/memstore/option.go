package memstore

import "time"

// Option configures a Store built by New.
type Option interface {
	apply(*Store)
}

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// WithClock makes now the store's clock, in place of the default time.Now.
// Every due-ness check, lease expiry and time stamp of the Store reads it.
// now must be safe for concurrent use; it is called with the store's lock
// held, so it must not call the Store. A nil now keeps the default.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(s *Store) {
		if now != nil {
			s.now = now
		}
	})
}
