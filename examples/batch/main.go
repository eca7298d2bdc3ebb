// Command batch shows ScheduleBatch: work fanned out to many jobs that run
// anywhere in the cluster, and one completion job that runs once, after
// the last of them ended, and reads their states and results.
//
// Every "words.count" child counts the words of one line of a text and
// returns the count as its result (HandleResult); one line is refused for
// good (ax.Permanent), so its child ends dead. The completion job,
// "words.total", pages through the children with BatchChildren and adds
// the counts up; a dead child does not hold the batch back, the
// completion sees it.
//
//	go run ./examples/batch                              # SQLite, a temporary file
//	DATABASE_URL=postgres://... go run ./examples/batch  # PostgreSQL
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/examples/internal/demo"
)

// Line is the payload of a "words.count" child.
type Line struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

// Kind names the job kind of Line.
func (Line) Kind() string { return "words.count" }

// Total is what the completion job found, sent to main.
type Total struct {
	Words, Counted, Dead int
}

// text is the work: one child per line.
var text = []string{
	"the job is in the store before Schedule returns",
	"a lease fences every attempt",
	"", // refused: an empty line is bad input, retrying will not help
	"the completion runs once after the last child",
	"whatever host ran the children",
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := demo.Open(ctx, "batch")
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "AX batch on %s\n", db.Where)

	s, err := ax.New(ax.Config{Store: db.Store, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	totals := make(chan Total, 1)
	if err := register(s, totals); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	}()

	res, err := countWords(ctx, s, text)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "batch %s: %d children, completion job %s\n", res.ID, len(res.Children), res.Completion)

	var t Total
	select {
	case t = <-totals:
	case <-ctx.Done():
		return errors.New("the completion job did not run in time")
	}
	st, err := s.Batch(ctx, res.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "children: %d succeeded, %d dead, %d pending\n", st.Succeeded, st.Dead, st.Pending)
	fmt.Fprintf(out, "completion: %d words in %d lines, %d line(s) dead\n", t.Words, t.Counted, t.Dead)
	if t.Counted+t.Dead != len(text) {
		return fmt.Errorf("the completion saw %d children, want %d", t.Counted+t.Dead, len(text))
	}
	return nil
}

// register registers the handlers of the two kinds on s: "words.count"
// returns a line's word count as its result, and "words.total", the
// completion, sends the sum of the batch's results to totals.
func register(s *ax.Scheduler, totals chan<- Total) error {
	err := ax.HandleResult(s, Line{}.Kind(), func(ctx context.Context, j *ax.Job, l Line) (int, error) {
		if strings.TrimSpace(l.Text) == "" {
			return 0, ax.Permanent(fmt.Errorf("line %d is empty", l.N)) // dead at once, no retry
		}
		return len(strings.Fields(l.Text)), nil // stored with the job
	})
	if err != nil {
		return err
	}
	return s.Handle("words.total", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		var t Total
		after := uuid.Nil
		for { // page through the children, 2 at a time to show the cursor
			page, err := s.BatchChildren(ctx, j.Batch, after, 2)
			if err != nil {
				return err
			}
			for _, c := range page {
				if c.State != ax.StateSucceeded {
					t.Dead++
					continue
				}
				var n int
				if err := json.Unmarshal(c.Result, &n); err != nil {
					return ax.Permanent(fmt.Errorf("child %s: result %s: %w", c.ID, c.Result, err))
				}
				t.Words += n
				t.Counted++
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].ID
		}
		totals <- t
		return nil
	}))
}

// countWords schedules a batch of one "words.count" child per line, with
// "words.total" as its completion. opts apply to every child.
func countWords(ctx context.Context, s *ax.Scheduler, lines []string, opts ...ax.ScheduleOption) (*ax.BatchResult, error) {
	b := ax.Batch{Completion: ax.Request{Kind: "words.total"}}
	for i, l := range lines {
		b.Children = append(b.Children, ax.NewRequest(Line{N: i + 1, Text: l}, opts...))
	}
	res, err := s.ScheduleBatch(ctx, b) // the children and the batch, all or nothing
	if err != nil {
		return nil, fmt.Errorf("schedule the batch: %w", err)
	}
	return res, nil
}
