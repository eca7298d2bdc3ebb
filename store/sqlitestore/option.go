package sqlitestore

import "time"

// Option configures a Store opened by Open.
type Option interface {
	apply(*config)
}

type config struct {
	now         func() time.Time
	readers     int
	busyTimeout time.Duration
	syncNormal  bool
}

func defaultConfig() config {
	return config{readers: 4, busyTimeout: 5 * time.Second}
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock makes now the store's clock, in place of the host's clock
// (time.Now). Every due-ness check, lease expiry and time stamp of the
// Store reads it; tests use it to move time by hand. now must be safe for
// concurrent use and must not call the Store. A nil now keeps the default.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithReaders sets how many read-only connections serve reads (Get,
// listings, counts). Defaults to 4; n < 1 keeps the default. Writes always
// go through one connection.
func WithReaders(n int) Option {
	return optionFunc(func(c *config) {
		if n >= 1 {
			c.readers = n
		}
	})
}

// WithBusyTimeout sets how long a statement waits for a lock another
// connection to the file holds (SQLite's busy_timeout) before failing with
// SQLITE_BUSY: your own handle on the file, a backup, the sqlite3 shell.
// Defaults to 5s; d <= 0 keeps the default.
func WithBusyTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.busyTimeout = d
		}
	})
}

// WithSyncNormal sets PRAGMA synchronous = NORMAL instead of the default
// FULL. In WAL mode a commit then survives a crash of the process (a panic,
// SIGKILL, the OOM killer) but not necessarily a crash of the operating
// system or a power loss, which can lose the last commits; in exchange a
// commit does not wait for an fsync. With the default, Insert returns only
// once the job is on disk.
func WithSyncNormal() Option {
	return optionFunc(func(c *config) { c.syncNormal = true })
}
