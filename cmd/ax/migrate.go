package main

import (
	"flag"
	"fmt"
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

func migrateUp(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		m, release, err := e.open.Migrator(e.ctx, connection{url: e.global.url, schema: e.global.schema})
		if err != nil {
			return err
		}
		defer release()
		before, _, err := m.Versions(e.ctx)
		if err != nil {
			return err
		}
		if err := m.Up(e.ctx); err != nil {
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
