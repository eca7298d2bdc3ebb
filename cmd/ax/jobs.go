package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// metaFlag collects repeatable key=value pairs.
type metaFlag map[string]string

func (m metaFlag) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (m metaFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	m[k] = val
	return nil
}

// timeFlag is a time given as RFC 3339, or as a duration meaning that
// long ago.
type timeFlag struct {
	t   *time.Time
	now func() time.Time
}

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timeFlag) Set(v string) error {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		*f.t = t
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m), got %q", v)
	}
	*f.t = f.now().Add(-d)
	return nil
}

// filterFlags are the flags that select jobs.
type filterFlags struct {
	kinds, states, priorities listFlag
	meta                      metaFlag
	parent                    string
	filter                    ax.JobFilter
	fs                        *flag.FlagSet
}

func newFilterFlags(fs *flag.FlagSet) *filterFlags {
	f := &filterFlags{meta: metaFlag{}, fs: fs}
	fs.Var(&f.kinds, "kind", "select jobs of these kinds (repeatable, comma-separated)")
	fs.Var(&f.states, "state", "select jobs in these states: "+stateNames()+" (repeatable, comma-separated)")
	fs.Var(&f.priorities, "priority", "select jobs of these priorities: high, normal, low (repeatable, comma-separated)")
	fs.StringVar(&f.filter.UniqueKey, "unique-key", "", "select the job with this unique key")
	fs.StringVar(&f.filter.UniqueKeyPrefix, "unique-key-prefix", "", "select jobs whose unique key starts with this")
	fs.Var(f.meta, "meta", "select jobs whose metadata has key=value (repeatable)")
	fs.StringVar(&f.filter.ErrorContains, "error-contains", "", "select jobs with an attempt error containing this text")
	fs.StringVar(&f.filter.Node, "node", "", "select jobs the node runs, or last ran")
	fs.StringVar(&f.parent, "parent", "", "select the jobs this job's end inserted (its follow-ups and Then jobs), by its full ID")
	for _, t := range []struct {
		name string
		t    *time.Time
		help string
	}{
		{"run-after", &f.filter.RunAfter, "select jobs due at or after this time"},
		{"run-before", &f.filter.RunBefore, "select jobs due before this time"},
		{"finished-after", &f.filter.FinishedAfter, "select jobs finished at or after this time"},
		{"finished-before", &f.filter.FinishedBefore, "select jobs finished before this time"},
	} {
		fs.Var(timeFlag{t: t.t, now: time.Now}, t.name, t.help+" (RFC 3339, or a duration ago: 90m)")
	}
	return f
}

func stateNames() string {
	names := make([]string, len(store.States))
	for i, s := range store.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// build returns the filter the flags select. Unknown state and priority
// names are usage errors.
func (f *filterFlags) build() (ax.JobFilter, error) {
	out := f.filter
	out.Kinds = f.kinds
	if f.parent != "" {
		id, err := uuid.Parse(f.parent)
		if err != nil {
			return out, usageErrorf("--parent: %q is not a job ID", f.parent)
		}
		out.Parent = id
	}
	if len(f.meta) > 0 {
		out.Metadata = f.meta
	}
	for _, s := range f.states {
		st, err := store.ParseState(strings.ToLower(s))
		if err != nil {
			return out, usageErrorf("--state: unknown state %q (one of %s)", s, stateNames())
		}
		out.States = append(out.States, st)
	}
	for _, p := range f.priorities {
		n, err := parsePriority(p)
		if err != nil {
			return out, err
		}
		out.Priorities = append(out.Priorities, n)
	}
	return out, nil
}

func parsePriority(s string) (int, error) {
	switch strings.ToLower(s) {
	case "high", "1":
		return store.PriorityHigh, nil
	case "normal", "2":
		return store.PriorityNormal, nil
	case "low", "3":
		return store.PriorityLow, nil
	}
	return 0, usageErrorf("--priority: unknown priority %q (high, normal or low)", s)
}

// describe says in words what the filter flags and ids select.
func (f *filterFlags) describe(ids []string) string {
	var parts []string
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "yes", "all", "batch", "json", "database-url", "schema", "timeout":
		default:
			parts = append(parts, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	if len(ids) > 0 {
		parts = append(parts, fmt.Sprintf("%d job ID(s)", len(ids)))
	}
	if len(parts) == 0 {
		return "every job"
	}
	return strings.Join(parts, " ")
}

func priorityName(p int) string { return ax.PriorityLevel(p).String() }

func jobsList(fs *flag.FlagSet) func(*env, []string) error {
	ff := newFilterFlags(fs)
	order := fs.String("order", "newest", "newest or oldest first")
	limit := fs.Int("limit", ax.DefaultListLimit, fmt.Sprintf("jobs per page, 1 to %d", store.MaxListLimit))
	cursor := fs.String("cursor", "", "continue the listing from the cursor a previous page printed")
	preview := fs.Int("preview", listPreviewBytes, fmt.Sprintf("bytes of each job's payload and result shown, 0 to %d (0: their sizes only);\n"+
		"jobs are read in brief, so a page over 1 MB payloads stays small (jobs show ID prints one whole)", store.MaxPreviewBytes))
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q (filters are flags)", args[0])
		}
		f, err := ff.build()
		if err != nil {
			return err
		}
		if *preview < 0 || *preview > store.MaxPreviewBytes {
			return usageErrorf("--preview: %d not in [0, %d]", *preview, store.MaxPreviewBytes)
		}
		// The store cuts the latest error to the preview too: read enough
		// of it for the table's column, and cut the values below.
		opts := ax.ListOptions{Filter: f, Cursor: *cursor, Limit: *limit, PreviewBytes: max(*preview, listErrorBytes)}
		switch *order {
		case "newest":
			opts.Order = ax.NewestFirst
		case "oldest":
			opts.Order = ax.OldestFirst
		default:
			return usageErrorf("--order: want newest or oldest, got %q", *order)
		}
		if *limit < 1 || *limit > store.MaxListLimit {
			return usageErrorf("--limit: %d not in [1, %d]", *limit, store.MaxListLimit)
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		list, err := a.List(e.ctx, opts)
		if err != nil {
			return err
		}
		for i, j := range list.Jobs {
			if j.Brief == nil {
				// A store that lists whole records.
				j = store.BriefRecord(j, opts.PreviewBytes)
				list.Jobs[i] = j
			}
			j.Brief.Payload, j.Brief.Result = store.CutText(j.Brief.Payload, *preview), store.CutText(j.Brief.Result, *preview)
		}
		if e.global.json {
			return printJSON(e.stdout, list)
		}
		header := []string{"ID", "KIND", "STATE", "ATTEMPT", "PRIORITY", "RUN AT", "SIZE", "LAST ERROR"}
		if *preview > 0 {
			header = append(header, "PAYLOAD")
		}
		t := newTable(e.stdout, header...)
		for _, j := range list.Jobs {
			lastErr := ""
			if n := len(j.Errors); n > 0 {
				lastErr = j.Errors[n-1].Error
			}
			row := []string{j.ID.String(), j.Kind, string(j.State), fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
				priorityName(j.Priority), when(j.RunAt), byteSize(j.Brief.PayloadSize), orDash(oneLine(lastErr, 60))}
			if *preview > 0 {
				row = append(row, payloadPreview(j.Brief))
			}
			t.row(row...)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(list.Jobs) == 0 {
			fmt.Fprintln(e.stdout, "(no jobs)")
		}
		if list.Cursor != "" {
			fmt.Fprintf(e.stdout, "next page: --cursor %s\n", list.Cursor)
		}
		return nil
	}
}

// listPreviewBytes is jobs list's default --preview: enough of a
// payload to tell jobs apart in a table row.
const listPreviewBytes = 64

// listErrorBytes is how much of each job's latest error jobs list reads
// at least, for its LAST ERROR column (60 characters of the first line).
const listErrorBytes = 256

// payloadPreview is b's payload preview for a table cell: on one line,
// with an ellipsis when the payload is longer.
func payloadPreview(b *store.Brief) string {
	s := strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace(b.Payload)
	if len(b.Payload) < b.PayloadSize {
		s += "…"
	}
	return s
}

// countDoc is what jobs count prints with --json, the HTTP API's
// GET /jobs/count response.
type countDoc struct {
	Count int64 `json:"count"`
}

// jobsCount prints how many jobs the filter flags select, exactly (as
// Admin.Count): the number alone on a line, for scripts.
func jobsCount(fs *flag.FlagSet) func(*env, []string) error {
	ff := newFilterFlags(fs)
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q (filters are flags)", args[0])
		}
		f, err := ff.build()
		if err != nil {
			return err
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		n, err := a.Count(e.ctx, f)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, countDoc{Count: n})
		}
		_, err = fmt.Fprintln(e.stdout, n)
		return err
	}
}

func jobsShow(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one job ID (or its first digits)")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		ids, err := jobIDs(e, a, args)
		if err != nil {
			return err
		}
		j, err := a.Get(e.ctx, ids[0])
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, j)
		}
		t := newTable(e.stdout, "ID:", j.ID.String())
		t.row("Kind:", j.Kind)
		t.row("State:", string(j.State)+flags(j))
		t.row("Priority:", priorityName(j.Priority))
		t.row("Attempt:", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
		t.row("Run at:", whenMS(j.RunAt))
		t.row("Scheduled at:", whenMS(j.ScheduledAt))
		t.row("Created at:", whenMS(j.CreatedAt))
		t.row("Attempted at:", whenMS(j.AttemptedAt))
		t.row("Finished at:", whenMS(j.FinishedAt))
		if j.Snoozes > 0 { // a snooze gives its attempt back: Attempt does not count it
			t.row("Snoozed:", fmt.Sprintf("%d time(s), last at %s", j.Snoozes, whenMS(j.SnoozedAt)))
		}
		t.row("Owner:", orDash(j.Owner))
		t.row("Unique key:", orDash(j.UniqueKey))
		var md []string
		for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
			md = append(md, k+"="+shown(j.Metadata[k]))
		}
		t.row("Metadata:", orDash(strings.Join(md, " ")))
		t.row("Payload:", shown(j.Payload))
		if j.Result != nil {
			t.row("Result:", shown(j.Result))
		}
		if err := t.flush(); err != nil {
			return err
		}
		printAttempts(e.stdout, j)
		return nil
	}
}

// printAttempts lists a job's attempts, oldest first: each failed one
// (from its error record: node, start, end, error) and the running or
// succeeded latest one (from the job: owner, attempted at, finished at).
// Error records written before the stores kept an attempt's node and
// start show "-" for them.
func printAttempts(w io.Writer, j *ax.JobRecord) {
	latest := ""
	switch j.State {
	case ax.StateRunning:
		latest = "running, lease until " + whenMS(j.LeaseExpiresAt)
	case ax.StateSucceeded:
		latest = "succeeded"
	}
	if len(j.Errors) == 0 && latest == "" {
		fmt.Fprintln(w, "Attempts:      none ended in an error")
		return
	}
	fmt.Fprintln(w, "Attempts:")
	for _, ae := range j.Errors {
		fmt.Fprintf(w, "  #%d  node %s  started %s  ended %s%s  failed:\n    %s\n", ae.Attempt, orDash(ae.Node),
			whenMS(ae.StartedAt), whenMS(ae.At), took(ae.StartedAt, ae.At), strings.ReplaceAll(ae.Error, "\n", "\n    "))
	}
	if latest != "" {
		fmt.Fprintf(w, "  #%d  node %s  started %s", j.Attempt, orDash(j.Owner), whenMS(j.AttemptedAt))
		if !j.FinishedAt.IsZero() {
			fmt.Fprintf(w, "  ended %s%s", whenMS(j.FinishedAt), took(j.AttemptedAt, j.FinishedAt))
		}
		fmt.Fprintf(w, "  %s\n", latest)
	}
}

// took formats how long an attempt took, " (1.5s)", when both ends are
// known.
func took(start, end time.Time) string {
	if start.IsZero() || end.IsZero() || end.Before(start) {
		return ""
	}
	return " (" + end.Sub(start).Round(time.Millisecond).String() + ")"
}

// flags describes a job's pending requests.
func flags(j *ax.JobRecord) string {
	var f []string
	if j.CancelRequested {
		f = append(f, "cancel requested")
	}
	if j.PauseRequested {
		f = append(f, "pause requested")
	}
	if len(f) == 0 {
		return ""
	}
	return " (" + strings.Join(f, ", ") + ")"
}

// bulk describes one bulk command.
type bulk struct {
	verb, done string // "retry", "retried"
	leftAlone  string // what the operation does not change, for the prompt
	do         func(a *ax.Admin, e *env, f ax.JobFilter, opts []ax.BulkOption) (int, error)
}

func jobsRetry(fs *flag.FlagSet) func(*env, []string) error {
	return bulkCommand(fs, bulk{"retry", "retried", "running, succeeded and already due jobs are left alone",
		func(a *ax.Admin, e *env, f ax.JobFilter, o []ax.BulkOption) (int, error) {
			return a.RetryJobs(e.ctx, f, o...)
		}})
}

func jobsCancel(fs *flag.FlagSet) func(*env, []string) error {
	return bulkCommand(fs, bulk{"cancel", "cancelled", "finished jobs are left alone; running ones are asked to stop",
		func(a *ax.Admin, e *env, f ax.JobFilter, o []ax.BulkOption) (int, error) {
			return a.CancelJobs(e.ctx, f, o...)
		}})
}

func jobsDelete(fs *flag.FlagSet) func(*env, []string) error {
	return bulkCommand(fs, bulk{"delete", "deleted", "only finished jobs are deleted",
		func(a *ax.Admin, e *env, f ax.JobFilter, o []ax.BulkOption) (int, error) {
			return a.DeleteJobs(e.ctx, f, o...)
		}})
}

// bulkResult is the JSON of a bulk command.
type bulkResult struct {
	Operation string `json:"operation"`
	Matched   int64  `json:"matched"`
	Changed   int    `json:"changed"`
}

// bulkCommand counts the jobs the filter selects, asks for confirmation
// (or takes --yes), and changes them.
func bulkCommand(fs *flag.FlagSet, b bulk) func(*env, []string) error {
	ff := newFilterFlags(fs)
	yes := fs.Bool("yes", false, "do not ask for confirmation (required when standard input is not a terminal)")
	batch := fs.Int("batch", ax.DefaultBulkBatch, fmt.Sprintf("jobs changed per database call, 1 to %d", store.MaxBulkLimit))
	var all *bool
	if b.verb == "delete" {
		all = fs.Bool("all", false, "allow a delete without filters: every finished job")
	}
	return func(e *env, args []string) error {
		f, err := ff.build()
		if err != nil {
			return err
		}
		opts := []ax.BulkOption{ax.BatchSize(*batch)}
		if all != nil && *all {
			opts = append(opts, ax.MatchAll())
		}
		if all != nil && !*all && f.IsZero() && len(args) == 0 {
			return usageErrorf("no filter selects the jobs to delete: give filters or job IDs, or --all to delete every finished job")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		if f.IDs, err = jobIDs(e, a, args); err != nil {
			return err
		}
		matched, err := a.Count(e.ctx, f)
		if err != nil {
			return err
		}
		res := bulkResult{Operation: b.verb, Matched: matched}
		if matched == 0 {
			if e.global.json {
				return printJSON(e.stdout, res)
			}
			fmt.Fprintf(e.stdout, "no jobs match %s: nothing to %s\n", ff.describe(args), b.verb)
			return nil
		}
		if !*yes {
			if err := confirm(e, fmt.Sprintf("%s the %d job(s) matching %s (%s)?", b.verb, matched, ff.describe(args), b.leftAlone)); err != nil {
				return err
			}
		}
		res.Changed, err = b.do(a, e, f, opts)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "%s %d of %d matching job(s)\n", b.done, res.Changed, matched)
		return nil
	}
}

// confirm asks question on a terminal and returns nil on yes. Off a
// terminal it refuses: a script must say --yes.
func confirm(e *env, question string) error {
	if !isTerminal(e.stdin) {
		return usageErrorf("refusing to change jobs without --yes: standard input is not a terminal")
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", strings.ToUpper(question[:1])+question[1:])
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("not confirmed: nothing changed")
}
