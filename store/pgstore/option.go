package pgstore

import (
	"fmt"
	"regexp"

	"github.com/axsched/ax/store"
)

// DefaultSchema is the PostgreSQL schema a Store keeps its tables in unless
// WithSchema names another.
const DefaultSchema = "ax"

// schemaName is what a schema name must look like: a lower-case SQL
// identifier that needs no quoting and fits NAMEDATALEN.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// validateSchema reports, wrapping store.ErrInvalidParams, a schema name
// that is not a safe identifier.
func validateSchema(name string) error {
	if !schemaName.MatchString(name) || len(name) > 63 {
		return fmt.Errorf("pgstore: schema name %q must match %s: %w", name, schemaName, store.ErrInvalidParams)
	}
	return nil
}

// Option configures New and Migrate.
type Option interface {
	apply(*options)
}

type options struct {
	schema       string
	noMigrate    bool
	listenerDSN  string
	txPooler     bool // WithTransactionPooler (pooler.go)
	asyncCommits bool // WithAsyncClaimsAndOutcomes (asynccommit.go)
	earlyStart   bool // WithEarlyDirectStart (earlystart.go)
	citusShards  int  // WithCitusShards (citusmigrate.go)
}

func buildOptions(opts []Option) (*options, error) {
	o := &options{schema: DefaultSchema}
	for _, opt := range opts {
		opt.apply(o)
	}
	if err := validateSchema(o.schema); err != nil {
		return nil, err
	}
	return o, nil
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithSchema keeps the Store's tables in the named PostgreSQL schema, so
// several applications can share one database. The name must match
// ^[a-z_][a-z0-9_]{0,62}$; New and Migrate return an error wrapping
// store.ErrInvalidParams, and touch nothing, otherwise. Defaults to
// DefaultSchema ("ax"). The schema is created by Migrate when missing.
func WithSchema(name string) Option {
	return optionFunc(func(o *options) { o.schema = name })
}

// WithoutMigrate makes New skip Migrate: the schema must already be at the
// version this package expects (run Migrate from a deploy step instead).
// A schema without AX's tables fails New with an error wrapping
// ErrNoSchema; one of a newer version, ErrSchemaTooNew.
func WithoutMigrate() Option {
	return optionFunc(func(o *options) { o.noMigrate = true })
}

// WithListenerConnString gives the LISTEN connection its own connection
// string. Use it when the pool goes through a transaction-mode pooler such
// as PgBouncer, which cannot keep a LISTEN registered: point dsn directly at
// the PostgreSQL server (see WithTransactionPooler). By default the
// listener opens one extra connection (outside the pool) with the pool's
// connection settings.
func WithListenerConnString(dsn string) Option {
	return optionFunc(func(o *options) { o.listenerDSN = dsn })
}
