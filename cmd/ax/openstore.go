package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// storeOpener opens the store --database-url (or DATABASE_URL) names:
//
//   - sqlite:PATH, sqlite://PATH (sqlite:///abs/path) or a path ending in
//     .db, .sqlite or .sqlite3: the SQLite file of store/sqlitestore;
//   - anything else: a PostgreSQL URL or connection string (pgOpener).
//
// A SQLite file is opened as it is, never created nor migrated behind a
// deploy's back (ax migrate up does that). While a service holds the file
// (sqlitestore.Open's lock), commands open it read-only: listings work,
// changes fail and say which process to ask.
type storeOpener struct {
	getenv func(string) string
}

// url returns the database the command names.
func (o storeOpener) url(c connection) string {
	if c.url != "" {
		return c.url
	}
	return o.getenv("DATABASE_URL")
}

// Store opens the store.
func (o storeOpener) Store(ctx context.Context, c connection) (store.Store, func(), error) {
	if path, ok := sqlitePath(o.url(c)); ok {
		return openSQLite(ctx, path, c.writes)
	}
	return pgOpener(o).Store(ctx, c)
}

// Migrator opens the store's migrations.
func (o storeOpener) Migrator(ctx context.Context, c connection) (migrator, func(), error) {
	if path, ok := sqlitePath(o.url(c)); ok {
		return sqliteMigrator{path: path}, func() {}, nil
	}
	return pgOpener(o).Migrator(ctx, c)
}

// sqlitePath returns the SQLite file url names, if it names one.
func sqlitePath(url string) (string, bool) {
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return strings.TrimPrefix(url, "sqlite://"), true
	case strings.HasPrefix(url, "sqlite:"):
		return strings.TrimPrefix(url, "sqlite:"), true
	case strings.Contains(url, "://") || strings.Contains(url, "="):
		return "", false // a PostgreSQL URL or key=value string
	}
	switch strings.ToLower(filepath.Ext(url)) {
	case ".db", ".sqlite", ".sqlite3":
		return url, true
	}
	return "", false
}

// openSQLite opens the SQLite file at path: with the file's lock when no
// one holds it, read-only beside the process that does (an error wrapping
// sqlitestore.ErrLocked instead when writes is set). A file at another
// schema version than this binary's is an error naming both.
func openSQLite(ctx context.Context, path string, writes bool) (store.Store, func(), error) {
	if path == "" {
		return nil, nil, usageErrorf("--database-url: sqlite: without a file path")
	}
	version, err := sqlitestore.FileSchemaVersion(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	if version == 0 {
		return nil, nil, noSchema(path, errNoSchema)
	}
	if bin := sqlitestore.SchemaVersion(); version != bin {
		return nil, nil, fmt.Errorf("%s: schema at version %d, this binary at version %d (see: ax migrate status)", path, version, bin)
	}
	st, err := sqlitestore.Open(ctx, path)
	if errors.Is(err, sqlitestore.ErrLocked) && writes {
		return nil, nil, fmt.Errorf("%w: this command needs the file to itself (serve the dashboard from that process with axhttp, or stop it)", err)
	}
	if errors.Is(err, sqlitestore.ErrLocked) {
		// A service runs on the file: read beside it; changes fail with
		// sqlitestore.ErrReadOnly, which says to make them through it.
		ro, rerr := sqlitestore.OpenReadOnly(ctx, path)
		if rerr != nil {
			return nil, nil, rerr
		}
		return ro, func() { _ = ro.Close() }, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close() }, nil
}

// sqliteMigrator migrates a SQLite file: sqlitestore.Open migrates.
type sqliteMigrator struct {
	path string
}

func (m sqliteMigrator) Up(ctx context.Context) error {
	st, err := sqlitestore.Open(ctx, m.path)
	if err != nil {
		return err
	}
	return st.Close()
}

func (m sqliteMigrator) Versions(ctx context.Context) (database, binary int, err error) {
	database, err = sqlitestore.FileSchemaVersion(ctx, m.path)
	if errors.Is(err, fs.ErrNotExist) {
		database, err = 0, nil // ax migrate up creates it
	}
	return database, sqlitestore.SchemaVersion(), err
}
