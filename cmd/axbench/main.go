// Command axbench measures AX on PostgreSQL: throughput, start lag,
// punctuality under load, claim cost with a large backlog, memory, retry
// storms, idle cost and insert rates. Each scenario runs in a database of
// its own (CREATE DATABASE axbench_<random>, migrated by pgstore) that is
// dropped afterwards.
//
//	go run ./cmd/axbench [flags] SCENARIO...   # or "all"
//	go run ./cmd/axbench -quick all            # small sizes: a smoke test
//	go run ./cmd/axbench -json lag             # one JSON object per scenario
//
// Scenarios: throughput, multiprocess, lag, immediate, sustained, backlog,
// retrystorm, idle, insert. Run with -h for the flags and their defaults.
//
// Figures are printed with the load average before and after each
// scenario: on a shared machine they are only as good as that load.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(workerMain(os.Args[1:]))
	}
	os.Exit(benchMain(os.Args[1:], os.Stdout, os.Stderr))
}

// scenario is one benchmark.
type scenario struct {
	name  string
	about string
	run   func(ctx context.Context, b *bench) (*result, error)
}

var scenarios = []scenario{
	{"throughput", "no-op jobs/s and CPU per 1k jobs in one process (COPY insert first)", runThroughput},
	{"multiprocess", "no-op jobs/s over several processes on one database, and proof of zero duplicates", runMultiprocess},
	{"lag", "start lag of jobs scheduled uniformly ahead, overall and per second of offset", runLag},
	{"immediate", "insert-to-start latency of jobs scheduled one at a time at a steady rate", runImmediate},
	{"sustained", "start lag, CPU and backlog while delayed jobs arrive at a steady rate", runSustained},
	{"backlog", "claim latency, throughput and RSS with far-future and finished jobs in the table", runBacklog},
	{"retrystorm", "retries per 100 ms when many jobs fail at once, jittered vs plain backoff", runRetryStorm},
	{"idle", "CPU of a scheduler with handlers and no jobs", runIdle},
	{"insert", "Schedule latency one at a time and ScheduleMany rates", runInsert},
}

// bench is the state shared by the scenarios of one run.
type bench struct {
	opt     options
	stdout  io.Writer
	stderr  io.Writer
	machine machine
}

// progressf writes a progress line to stderr.
func (b *bench) progressf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "axbench: "+format+"\n", args...)
}

// benchMain runs the command with args and returns its exit code.
func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("axbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt options
	opt.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: axbench [flags] SCENARIO... (or all)\n\nscenarios:\n")
		for _, s := range scenarios {
			fmt.Fprintf(stderr, "  %-13s %s\n", s.name, s.about)
		}
		fmt.Fprintf(stderr, "\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opt.quick {
		opt.applyQuick(fs)
	}
	if err := opt.parseLists(); err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		return 2
	}
	todo, err := selectScenarios(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		fs.Usage()
		return 2
	}
	if opt.cpuProfile != "" {
		f, err := os.Create(opt.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{opt: opt, stdout: stdout, stderr: stderr}
	b.machine, err = describeMachine(ctx, opt.db)
	if err != nil {
		fmt.Fprintln(stderr, "axbench:", err)
		return 1
	}
	if !opt.json {
		b.machine.print(stdout)
	}
	code := 0
	for _, sc := range todo {
		r, err := runOne(ctx, b, sc)
		if err != nil {
			fmt.Fprintf(stderr, "axbench: %s: %v\n", sc.name, err)
			code = 1
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if opt.json {
			r.Machine = &b.machine
			if err := r.writeJSON(stdout); err != nil {
				fmt.Fprintln(stderr, "axbench:", err)
				return 1
			}
		} else {
			r.printTable(stdout)
		}
	}
	if opt.memProfile != "" {
		if err := writeHeapProfile(opt.memProfile); err != nil {
			fmt.Fprintln(stderr, "axbench:", err)
			code = 1
		}
	}
	return code
}

// runOne runs a scenario and stamps its load and duration.
func runOne(ctx context.Context, b *bench, sc scenario) (*result, error) {
	b.progressf("%s: starting", sc.name)
	load := loadAvg()
	start := time.Now()
	r, err := sc.run(ctx, b)
	if err != nil {
		return nil, err
	}
	r.Scenario = sc.name
	r.LoadBefore, r.LoadAfter = load, loadAvg()
	r.Seconds = time.Since(start).Seconds()
	b.progressf("%s: done in %.1fs", sc.name, r.Seconds)
	return r, nil
}

func selectScenarios(names []string) ([]scenario, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("name at least one scenario, or all")
	}
	var out []scenario
	for _, n := range names {
		if n == "all" {
			return scenarios, nil
		}
		found := false
		for _, s := range scenarios {
			if s.name == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q", n)
		}
	}
	return out, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// defaultDB is the server used when neither -db nor TEST_DATABASE_URL is
// given.
const defaultDB = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}
