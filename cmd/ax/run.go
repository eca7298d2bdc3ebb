package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
)

// connection names the database and schema the commands act on.
type connection struct {
	url    string
	schema string
	// writes: the command cannot work read-only (ax serve writes nonces
	// and sessions for every request), so a SQLite file another process
	// holds is an error at its start, not on its first request.
	writes bool
}

// opener opens what the commands act on. The binary opens PostgreSQL
// (pgOpener); tests open a memstore, so that every command runs
// in-process against any store.Store.
type opener interface {
	// Store opens the cluster's store; release frees it.
	Store(ctx context.Context, c connection) (st store.Store, release func(), err error)
	// Migrator opens the database's schema migrations.
	Migrator(ctx context.Context, c connection) (m migrator, release func(), err error)
}

// migrator applies and reports schema migrations.
type migrator interface {
	// Up migrates the schema to the binary's version.
	Up(ctx context.Context) error
	// Versions reports the database's schema version and the binary's.
	Versions(ctx context.Context) (database, binary int, err error)
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// errNotFound marks a missing kind: exit code 3, like ax.ErrNotFound.
var errNotFound = errors.New("not found")

// errNoSchema is the error of a SQLite file without AX's tables
// (PostgreSQL's is pgstore.ErrNoSchema).
var errNoSchema = errors.New("no AX schema")

// hintError replaces an error's text with one that says what to do,
// keeping the error for errors.Is.
type hintError struct {
	msg string
	err error
}

func (e hintError) Error() string { return e.msg }
func (e hintError) Unwrap() error { return e.err }

// noSchema is the error of a database (where: a schema or a file) that
// holds no AX tables: the URL names the wrong one, or nobody migrated it.
func noSchema(where string, err error) error {
	return hintError{msg: where + ": no AX schema here: wrong database, or run `ax migrate up`", err: err}
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue),
		errors.Is(err, ax.ErrInvalidFilter), errors.Is(err, ax.ErrInvalidCursor),
		errors.Is(err, ax.ErrInvalidOption), errors.Is(err, ax.ErrInvalidKind),
		errors.Is(err, ax.ErrInvalidSchedule), errors.Is(err, ax.ErrFilterMatchesAll),
		errors.Is(err, store.ErrInvalidParams): // a value the store refused (a schema name...)
		return exitUsage
	case errors.Is(err, ax.ErrNotFound), errors.Is(err, ax.ErrScheduleNotFound), errors.Is(err, errNotFound):
		return exitNotFound
	}
	return exitError
}

// env is what a command runs with.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	open   opener
	global *globals
	// st is the store admin opened, for the calls Admin does not make
	// (resolving job ID prefixes).
	st store.Store
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	url     string
	schema  string
	json    bool
	timeout time.Duration
	// encryptionKeys is the key ring file of encryption at rest
	// (encryption.go).
	encryptionKeys string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "database-url", g.url, "PostgreSQL URL, or sqlite:PATH for a SQLite file (default $DATABASE_URL)")
	fs.StringVar(&g.schema, "schema", g.schema, "PostgreSQL schema of the AX tables (not used with SQLite)")
	fs.BoolVar(&g.json, "json", g.json, "print one JSON document instead of a table")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "give up on the database after this long")
	fs.StringVar(&g.encryptionKeys, "encryption-keys", g.encryptionKeys, "key ring file of encryption at rest: shows sealed jobs plain (default $AX_ENCRYPTION_KEYS)")
}

// command is one leaf command.
type command struct {
	path  string // "jobs list"
	args  string // positional arguments, for the usage line
	about string
	// flags registers the command's own flags and returns the function
	// that runs it with the positional arguments.
	flags func(fs *flag.FlagSet) func(e *env, args []string) error
}

var commands = []command{
	{"migrate up", "", "migrate the schema to this binary's version", migrateUp},
	{"migrate status", "", "show the schema version of the database and of this binary", migrateStatus},
	{"jobs list", "", "list jobs (newest first), one page at a time, in brief: payload size and preview", jobsList},
	{"jobs count", "", "count the jobs the filters select, exactly", jobsCount},
	{"jobs show", "ID", "show one job and its attempts (ID or its first digits)", jobsShow},
	{"jobs retry", "[ID...]", "make dead, cancelled, paused and future jobs due now", jobsRetry},
	{"jobs cancel", "[ID...]", "cancel jobs (running ones are asked to stop)", jobsCancel},
	{"jobs delete", "[ID...]", "delete finished jobs (succeeded, dead, cancelled)", jobsDelete},
	{"jobs reencrypt", "", "re-seal encrypted jobs with the current key, and with --seal-plain the plain ones (--encryption-keys)", jobsReencrypt},
	{"keys usage", "", "count the jobs each encryption key seals", keysUsage},
	{"keys remove", "ID", "remove an encryption key from --encryption-keys, refused while jobs need it", keysRemove},
	{"kinds list", "", "list kinds: pause state, jobs by state, nodes", kindsList},
	{"kinds pause", "KIND", "stop every host from starting jobs of a kind", kindsPause},
	{"kinds resume", "KIND", "let hosts run a paused kind again", kindsResume},
	{"kinds open", "KIND", "open a kind's circuit breaker: none of its jobs starts until its cool-down ends", kindsBreaker(true)},
	{"kinds close", "KIND", "close a kind's circuit breaker: its jobs start again at once", kindsBreaker(false)},
	{"kinds partitions", "KIND", "list the partitions whose circuit breaker is open, half-open or counting failures", kindsPartitions},
	{"kinds open-partition", "KIND KEY", "open one partition's circuit breaker: none of its jobs starts until its cool-down ends", kindsPartitionBreaker(true)},
	{"kinds close-partition", "KIND KEY", "close one partition's circuit breaker: its jobs start again at once", kindsPartitionBreaker(false)},
	{"periodic list", "", "list periodic schedules", periodicList},
	{"periodic pause", "NAME", "pause a schedule: its ticks pass without jobs", periodicPause},
	{"periodic resume", "NAME", "resume a paused schedule", periodicResume},
	{"periodic trigger", "NAME", "run a schedule's job once, now (one manual run at a time unless --force)", periodicTrigger},
	{"nodes", "", "list the cluster's nodes and the maintenance leader", nodesCmd},
	{"stats", "", "show the queue by kind and state", statsCmd},
	{"serve", "", "serve the HTTP API and the dashboard until interrupted", serveCmd},
	{"sessions revoke", "KEY_ID", "end every dashboard session of a key, on every server on the store", sessionsRevoke},
}

// run runs the command line args and returns the exit code. Everything
// it does goes through open, stdin, stdout and stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, open opener) int {
	g := &globals{schema: "ax", timeout: time.Minute, encryptionKeys: os.Getenv("AX_ENCRYPTION_KEYS")}
	root := flag.NewFlagSet("ax", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	g.register(root)
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "ax: %v\n", err)
		usage(stderr)
		return exitUsage
	}
	rest := root.Args()
	cmd, rest := findCommand(rest)
	if cmd == nil {
		if len(rest) == 1 && rest[0] == "help" {
			usage(stdout)
			return exitOK
		}
		if len(rest) == 0 {
			usage(stderr)
			return exitUsage
		}
		fmt.Fprintf(stderr, "ax: unknown command %q\n", strings.Join(rest, " "))
		usage(stderr)
		return exitUsage
	}
	fs := flag.NewFlagSet("ax "+cmd.path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	do := cmd.flags(fs)
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, cmd, fs)
			return exitOK
		}
		fmt.Fprintf(stderr, "ax %s: %v\n", cmd.path, err)
		commandUsage(stderr, cmd, fs)
		return exitUsage
	}
	if cmd.path != "serve" { // a server runs until interrupted
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, open: open, global: g}
	if err := do(e, pos); err != nil {
		fmt.Fprintf(stderr, "ax %s: %v\n", cmd.path, err)
		return exitCode(err)
	}
	return exitOK
}

// findCommand finds the longest command path args start with.
func findCommand(args []string) (*command, []string) {
	for _, n := range []int{2, 1} {
		if len(args) < n {
			continue
		}
		path := strings.Join(args[:n], " ")
		for i := range commands {
			if commands[i].path == path {
				return &commands[i], args[n:]
			}
		}
	}
	return nil, args
}

// parseInterspersed parses flags wherever they are among the positional
// arguments (ax jobs show ID --json), which the flag package alone stops
// at, and returns the positional ones; everything after "--" is
// positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `ax operates an AX cluster through its database.

Usage:
  ax [--database-url URL] [--schema ax] [--json] COMMAND [flags] [args]

Commands:`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-34s %s\n", strings.TrimSpace(c.path+" "+c.args), c.about)
	}
	fmt.Fprintln(w, `
Run "ax COMMAND -h" for a command's flags. Job IDs may be given as their
first digits (4 or more). With --json a command prints one JSON document;
the documents and exit codes are described by "go doc
github.com/axsched/ax/cmd/ax".
Exit codes: 0 ok, 1 error, 2 usage, 3 not found.`)
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: ax %s [flags]\n\n%s\n\nFlags:\n", strings.TrimSpace(c.path+" "+c.args), c.about)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if env := commandEnv[c.path]; env != "" {
		fmt.Fprintf(w, "\nEnvironment:\n%s\n", env)
	}
}

// commandEnv is what a command reads from the environment besides
// DATABASE_URL, for its -h (issue 41: ax serve -h did not say that
// AX_SESSION_KEY signs the dashboard's sessions).
var commandEnv = map[string]string{
	"serve": "  AX_SESSION_KEY\n    \tsigns the dashboard's session cookies (32 bytes or more of randomness); set the same\n" +
		"    \ton every ax serve behind one address, or sessions end with the process and other\n" +
		"    \tprocesses refuse its cookies",
}

// admin opens the store and returns an Admin on it.
func (e *env) admin() (*ax.Admin, func(), error) {
	st, release, err := e.open.Store(e.ctx, connection{url: e.global.url, schema: e.global.schema})
	if err != nil {
		return nil, nil, err
	}
	ring, err := e.keyRing() // encryption.go
	if err != nil {
		release()
		return nil, nil, err
	}
	a, err := ax.NewAdmin(ax.AdminConfig{Store: st, Logger: zap.NewNop(), Keys: ring})
	if err != nil {
		release()
		return nil, nil, err
	}
	e.st = st
	return a, release, nil
}

// isTerminal reports whether f (a standard input, output or error) is an
// interactive terminal. Tests pass one with an IsTerminal method.
func isTerminal(v any) bool {
	if t, ok := v.(interface{ IsTerminal() bool }); ok {
		return t.IsTerminal()
	}
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
