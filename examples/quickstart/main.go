// Command quickstart runs AX for real and prints what happens: an immediate
// job, a delayed job, a job that fails twice and then succeeds (its retries
// spaced by jittered exponential backoff), a duplicate refused by its
// unique key, and a batch of "work" jobs. Every transition is a structured
// log line on stderr; stdout has a line per work job started and done, and
// a summary.
//
// By default the jobs live in an SQLite file, ./ax-quickstart.db: run the
// command twice and the second run finds the jobs of the first. Interrupt
// it while it runs (Ctrl-C hands the unfinished jobs back) or kill it
// (kill -9) and run it again: the jobs that had not finished run then, and
// those that had do not run again.
//
//	go run ./examples/quickstart                       # SQLite file ./ax-quickstart.db
//	go run ./examples/quickstart -db /tmp/jobs.db      # another file (or AX_QUICKSTART_DB)
//	go run ./examples/quickstart -mem                  # in memory: nothing survives
//	DATABASE_URL=postgres://... go run ./examples/quickstart   # PostgreSQL
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Greeting is the payload of the "greet" kind.
type Greeting struct {
	Name string `json:"name"`
}

// Work is the payload of the "work" kind.
type Work struct {
	N int `json:"n"`
}

// options are the command's flags.
type options struct {
	dbPath   string
	mem      bool
	work     int
	workTime time.Duration
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(errOut)
	def := os.Getenv("AX_QUICKSTART_DB")
	if def == "" {
		def = "ax-quickstart.db"
	}
	var o options
	fs.StringVar(&o.dbPath, "db", def, "SQLite file of the jobs (default from AX_QUICKSTART_DB)")
	fs.BoolVar(&o.mem, "mem", false, "keep the jobs in memory instead")
	fs.IntVar(&o.work, "work", 10, "number of work jobs to schedule")
	fs.DurationVar(&o.workTime, "work-time", 100*time.Millisecond, "how long each work job works")
	return o, fs.Parse(args)
}

func run(ctx context.Context, opts options, out io.Writer) error {
	out = &lockedWriter{w: out} // handlers print concurrently, a line per call
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	logger := newLogger()
	defer logger.Sync() //nolint:errcheck // stderr sync errors are not actionable

	st, err := openStore(ctx, opts)
	if err != nil {
		return err
	}
	defer st.close()
	fmt.Fprintf(out, "AX quickstart on %s\n", st.where)

	s, err := ax.New(ax.Config{Store: st.st, Logger: logger})
	if err != nil {
		return err
	}
	// Jobs an earlier run left unfinished (it was killed, or stopped
	// before they were due) run in this one; it waits for them too.
	leftover, err := unfinished(ctx, s)
	if err != nil {
		return err
	}
	if c, ok := st.st.(store.Counter); ok {
		counts, err := c.CountJobs(ctx)
		if err != nil {
			return err
		}
		if held := summarize(counts); held != "" {
			fmt.Fprintf(out, "the store holds jobs of earlier runs: %s\n", held)
		}
	}
	if len(leftover) > 0 {
		fmt.Fprintf(out, "found %d unfinished job(s) from an earlier run: they run now\n", len(leftover))
	}
	fmt.Fprintln(out)

	err = ax.Handle(s, "greet", func(ctx context.Context, j *ax.Job, g Greeting) error {
		logger.Info("hello from a handler", zap.String("name", g.Name), zap.Duration("claim_lag", j.ClaimLag()))
		return nil
	})
	if err != nil {
		return err
	}
	err = s.Handle("flaky", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		if j.Attempt < 3 {
			return fmt.Errorf("downstream unavailable (attempt %d)", j.Attempt)
		}
		return nil
	}), ax.MaxAttempts(5), ax.Retry(ax.ExponentialBackoff{Base: 400 * time.Millisecond, Max: 2 * time.Second}))
	if err != nil {
		return err
	}
	err = ax.Handle(s, "work", func(ctx context.Context, j *ax.Job, w Work) error {
		fmt.Fprintf(out, "work %s start attempt %d\n", j.ID, j.Attempt)
		select {
		case <-time.After(opts.workTime):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done, err := recordRun(ctx, st, j.ID)
		if err != nil {
			return err
		}
		if !done {
			// An earlier attempt did the work and died before its success
			// was written: at-least-once delivery, made once by the check.
			fmt.Fprintf(out, "work %s already done by an earlier attempt\n", j.ID)
			return nil
		}
		fmt.Fprintf(out, "work %s done\n", j.ID)
		return nil
	}, ax.Concurrency(4), ax.Priority(ax.Low))
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}

	runID := uuid.NewString()[:8] // unique keys of this run only
	type scheduled struct {
		what string
		res  ax.ScheduleResult
	}
	var jobs []scheduled
	schedule := func(what, kind string, payload any, opts ...ax.ScheduleOption) error {
		res, err := s.Schedule(ctx, kind, payload, opts...)
		if err != nil {
			return fmt.Errorf("schedule %s: %w", what, err)
		}
		jobs = append(jobs, scheduled{what, res})
		return nil
	}
	if err := schedule("immediate", "greet", Greeting{Name: "immediate"}); err != nil {
		return err
	}
	if err := schedule("delayed 2s", "greet", Greeting{Name: "delayed"}, ax.In(2*time.Second)); err != nil {
		return err
	}
	if err := schedule("fails twice", "flaky", nil, ax.Priority(ax.High)); err != nil {
		return err
	}
	key := ax.UniqueKey("welcome:" + runID)
	if err := schedule("unique", "greet", Greeting{Name: "unique"}, key, ax.In(time.Second)); err != nil {
		return err
	}
	if err := schedule("unique again", "greet", Greeting{Name: "duplicate"}, key); err != nil {
		return err
	}
	reqs := make([]ax.Request, opts.work)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: "work", Payload: Work{N: i}}
	}
	work, err := s.ScheduleMany(ctx, reqs)
	if err != nil {
		return fmt.Errorf("schedule work: %w", err)
	}

	wait := append([]uuid.UUID(nil), leftover...)
	for _, j := range jobs[:4] {
		wait = append(wait, j.res.ID)
	}
	for _, w := range work {
		wait = append(wait, w.ID)
	}
	records, err := waitFinal(ctx, s, wait...)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	if stopErr := s.Stop(stopCtx); stopErr != nil && err == nil {
		err = fmt.Errorf("stop: %w", stopErr)
	}
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "\n%-13s %-8s %-10s %-9s %-11s %s\n", "JOB", "KIND", "STATE", "ATTEMPTS", "START LAG", "NOTE")
	for _, j := range jobs {
		rec := records[j.res.ID]
		note := ""
		if j.res.Duplicate {
			note = "duplicate refused: same job as 'unique'"
		}
		for _, e := range rec.Errors {
			note += fmt.Sprintf("attempt %d failed at +%s; ", e.Attempt, e.At.Sub(rec.CreatedAt).Round(time.Millisecond))
		}
		fmt.Fprintf(out, "%-13s %-8s %-10s %-9d %-11s %s\n", j.what, rec.Kind, rec.State, rec.Attempt,
			rec.AttemptedAt.Sub(rec.RunAt).Round(100*time.Microsecond), strings.TrimSuffix(note, "; "))
	}
	fmt.Fprintf(out, "%-13s %-8s %d jobs of this run, %d left by an earlier one\n", "work", "work", len(work), len(leftover))
	for _, id := range wait {
		if records[id].State != ax.StateSucceeded {
			return fmt.Errorf("job %s (%s) ended %s", id, records[id].Kind, records[id].State)
		}
	}
	fmt.Fprintln(out, "\nall jobs succeeded")
	return nil
}

// summarize returns counts by state, in the order of store.States.
func summarize(counts []store.StateCount) string {
	by := map[store.State]int64{}
	for _, c := range counts {
		by[c.State] += c.Count
	}
	var parts []string
	for _, st := range store.States {
		if by[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

// unfinished returns the IDs of the jobs in the store that are not final.
func unfinished(ctx context.Context, s *ax.Scheduler) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	opts := ax.ListOptions{Filter: ax.JobFilter{States: []store.State{store.StateScheduled, store.StateRetrying,
		store.StatePaused, store.StateRunning}}, Order: ax.OldestFirst, Limit: 1000}
	for {
		page, err := s.Admin().List(ctx, opts)
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, nil // a store that cannot list (pgstore today)
		}
		if err != nil {
			return nil, fmt.Errorf("list unfinished jobs: %w", err)
		}
		for _, j := range page.Jobs {
			if j.State != store.StatePaused { // nobody would resume it
				ids = append(ids, j.ID)
			}
		}
		if page.Cursor == "" {
			return ids, nil
		}
		opts.Cursor = page.Cursor
	}
}

// recordRun records that the work of job id was done, unless an earlier
// attempt recorded it, and reports whether it recorded it. Without the
// SQLite store (no table) every run is recorded.
func recordRun(ctx context.Context, st *openedStore, id uuid.UUID) (bool, error) {
	if st.db == nil {
		return true, nil
	}
	res, err := st.db.ExecContext(ctx, `INSERT INTO quickstart_runs (job_id, pid)
		SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM quickstart_runs WHERE job_id = ?1)`, id.String(), processID)
	if err != nil {
		return false, fmt.Errorf("record run: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// waitFinal polls until every job is in a final state.
func waitFinal(ctx context.Context, s *ax.Scheduler, ids ...uuid.UUID) (map[uuid.UUID]*store.JobRecord, error) {
	out := make(map[uuid.UUID]*store.JobRecord, len(ids))
	for {
		final := true
		for _, id := range ids {
			if rec := out[id]; rec != nil && rec.State.Final() {
				continue
			}
			rec, err := s.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			out[id] = rec
			final = final && rec.State.Final()
		}
		if final {
			return out, nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, errors.New("interrupted: the unfinished jobs are handed back; run again to finish them")
			}
			return nil, errors.New("jobs did not finish in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newLogger logs every transition, debug level included, in a readable
// console format with structured fields.
func newLogger() *zap.Logger {
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(zapcore.DebugLevel)
	cfg.DisableStacktrace = true
	cfg.DisableCaller = true
	cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	logger, err := cfg.Build()
	if err != nil {
		panic(err)
	}
	return logger
}

// processID is this process's ID, recorded with each run.
var processID = os.Getpid()

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
