// Command quickstart runs AX for real and prints what happens: an immediate
// job, a delayed job, a job that fails twice and then succeeds (its retries
// spaced by jittered exponential backoff), and a duplicate refused by its
// unique key. Every transition is a structured log line; a summary ends it.
//
//	go run ./examples/quickstart                      # embedded in-memory store
//	DATABASE_URL=postgres://... go run ./examples/quickstart   # PostgreSQL
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Greeting is the payload of the "greet" kind.
type Greeting struct {
	Name string `json:"name"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := newLogger()
	defer logger.Sync() //nolint:errcheck // stderr sync errors are not actionable

	st, where, closeStore, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	fmt.Printf("AX quickstart on %s\n\n", where)

	s, err := ax.New(ax.Config{Store: st, Logger: logger})
	if err != nil {
		return err
	}
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

	records, err := waitFinal(ctx, s, jobs[0].res.ID, jobs[1].res.ID, jobs[2].res.ID, jobs[3].res.ID)
	if err != nil {
		return err
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	if err := s.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}

	fmt.Printf("\n%-13s %-8s %-10s %-9s %-11s %s\n", "JOB", "KIND", "STATE", "ATTEMPTS", "START LAG", "NOTE")
	for _, j := range jobs {
		rec := records[j.res.ID]
		note := ""
		if j.res.Duplicate {
			note = "duplicate refused: same job as 'unique'"
		}
		for _, e := range rec.Errors {
			note += fmt.Sprintf("attempt %d failed at +%s; ", e.Attempt, e.At.Sub(rec.CreatedAt).Round(time.Millisecond))
		}
		fmt.Printf("%-13s %-8s %-10s %-9d %-11s %s\n", j.what, rec.Kind, rec.State, rec.Attempt,
			rec.AttemptedAt.Sub(rec.RunAt).Round(100*time.Microsecond), strings.TrimSuffix(note, "; "))
	}
	for _, j := range jobs {
		if records[j.res.ID].State != ax.StateSucceeded {
			return fmt.Errorf("job %q ended %s", j.what, records[j.res.ID].State)
		}
	}
	fmt.Println("\nall jobs succeeded")
	return nil
}

// waitFinal polls until every job is in a final state.
func waitFinal(ctx context.Context, s *ax.Scheduler, ids ...uuid.UUID) (map[uuid.UUID]*store.JobRecord, error) {
	out := make(map[uuid.UUID]*store.JobRecord, len(ids))
	for {
		for _, id := range ids {
			rec, err := s.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			out[id] = rec
		}
		final := true
		for _, rec := range out {
			final = final && rec.State.Final()
		}
		if final {
			return out, nil
		}
		select {
		case <-ctx.Done():
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
