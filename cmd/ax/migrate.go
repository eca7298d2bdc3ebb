package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/axsched/ax/store/pgstore"
)

// migrateResult is the JSON of the migrate commands.
type migrateResult struct {
	Database int    `json:"database"`
	Binary   int    `json:"binary"`
	Status   string `json:"status"`
	// Before is the database's version before migrate up.
	Before *int `json:"before,omitempty"`
}

// status names the relation of the database's version to the binary's.
func status(database, binary int) string {
	switch {
	case database == binary:
		return "up-to-date"
	case database < binary:
		return "behind"
	}
	return "ahead"
}

func migrateStatus(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		m, release, err := e.open.Migrator(e.ctx, connection{url: e.global.url, schema: e.global.schema})
		if err != nil {
			return err
		}
		defer release()
		db, bin, err := m.Versions(e.ctx)
		if err != nil {
			return err
		}
		res := migrateResult{Database: db, Binary: bin, Status: status(db, bin)}
		if e.global.json {
			return printJSON(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "schema %s: database at version %d, this binary at version %d: ", e.global.schema, db, bin)
		switch res.Status {
		case "up-to-date":
			fmt.Fprintln(e.stdout, "up to date")
		case "behind":
			fmt.Fprintln(e.stdout, "behind (run: ax migrate up)")
		default:
			fmt.Fprintln(e.stdout, "the database is newer than this binary (upgrade ax)")
		}
		return nil
	}
}

// citusMigrator is a migrator that can also distribute the schema over a
// Citus cluster (migrate up --citus): the PostgreSQL one.
type citusMigrator interface {
	UpCitus(ctx context.Context, shards int) error
}

func migrateUp(fs *flag.FlagSet) func(*env, []string) error {
	citus := fs.Bool("citus", false, "migrate, then distribute the schema over the Citus cluster whose coordinator the URL names, for pgstore.NewCitus (one-way; an empty schema only)")
	shards := fs.Int("shards", 0, "with --citus: the schema's shard count, fixed once distributed (0: the cluster's citus.shard_count)")
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		if *shards != 0 && !*citus {
			return usageErrorf("--shards needs --citus")
		}
		if *shards < 0 || *shards > 1<<16 {
			return usageErrorf("--shards %d: want 1 to 65536", *shards)
		}
		m, release, err := e.open.Migrator(e.ctx, connection{url: e.global.url, schema: e.global.schema})
		if err != nil {
			return err
		}
		defer release()
		cm, ok := m.(citusMigrator)
		if *citus && !ok {
			return usageErrorf("--citus needs the URL of a Citus coordinator (postgres://...)")
		}
		before, _, err := m.Versions(e.ctx)
		if err != nil {
			return err
		}
		if *citus {
			err = cm.UpCitus(e.ctx, *shards)
		} else {
			err = m.Up(e.ctx)
		}
		if errors.Is(err, pgstore.ErrDistributed) {
			return hintError{msg: fmt.Sprintf("schema %s is distributed by Citus: run `ax migrate up --citus`", e.global.schema), err: err}
		}
		if err != nil {
			return err
		}
		db, bin, err := m.Versions(e.ctx)
		if err != nil {
			return err
		}
		res := migrateResult{Database: db, Binary: bin, Status: status(db, bin), Before: &before}
		if e.global.json {
			return printJSON(e.stdout, res)
		}
		if before == db {
			fmt.Fprintf(e.stdout, "schema %s already at version %d\n", e.global.schema, db)
			return nil
		}
		fmt.Fprintf(e.stdout, "schema %s migrated from version %d to %d\n", e.global.schema, before, db)
		return nil
	}
}
