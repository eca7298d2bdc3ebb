package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// workerEnv marks a process started by startWorker: main (and the test
// binary's TestMain) runs workerMain instead of the benchmarks.
const workerEnv = "AXBENCH_WORKER"

// workerResult is what a worker process reports when stopped.
type workerResult struct {
	Count    int64   `json:"count"`     // handler calls
	LastNS   int64   `json:"last_ns"`   // wall clock of the last handler call
	StopNS   int64   `json:"stop_ns"`   // wall clock when Stop returned (outcomes written)
	UserS    float64 `json:"user_s"`    // CPU from "go" to stopped
	SysS     float64 `json:"sys_s"`     //
	RSSKB    int64   `json:"rss_kb"`    // VmRSS before stopping
	PeakKB   int64   `json:"peak_kb"`   // highest VmRSS sampled while running
	HWMKB    int64   `json:"hwm_kb"`    // VmHWM
	LagsUS   []int64 `json:"lags_us"`   // start lags (store clock), with -lags
	EarlyCnt int64   `json:"early_cnt"` // negative start lags
	// Starts are, with -starts, each handler call's claim time and run_at
	// (store clock, Unix µs), its start (host clock, Unix ns), and when the
	// Claim call that took it began and returned (host clock, Unix ns;
	// zero for a job Schedule started directly).
	Starts []startRecord `json:"starts,omitempty"`
	// Claims counts the worker's Claim calls.
	Claims claimCounts `json:"claims"`
	// ClaimToStart counts, per handler call, the claim's store time to
	// the handler's start (host clock): the claim's statement and return,
	// and the wait of a job taken ahead for a free slot.
	ClaimToStart waitCounts `json:"claim_to_start"`
	// HighLag counts, per High-priority job (the multiprocess probes),
	// its insert's store time to its handler's start (host clock).
	HighLag waitCounts `json:"high_lag"`
}

// workerMain is a worker process: a Scheduler on -dsn running no-op jobs.
// Protocol on stdout: "ready" once set up, "progress N" while running, then
// "result {json}". On stdin: "go" starts the Scheduler; "stop" or end of
// input stops it.
func workerMain(args []string) int {
	fs := flag.NewFlagSet("axbench worker", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database URL")
	workers := fs.Int("workers", 0, "Config.Workers (0: default)")
	conns := fs.Int("conns", 0, "pool size")
	lags := fs.Bool("lags", false, "record start lags")
	cpuProfile := fs.String("cpuprofile", "", "CPU profile file")
	var fl workerFlow
	fs.IntVar(&fl.global, "global", 0, "ax.GlobalConcurrency of the no-op kind (0: none)")
	fs.IntVar(&fl.rate, "rate", 0, "ax.RateLimit of the no-op kind, starts per -rate-per (0: none)")
	fs.DurationVar(&fl.ratePer, "rate-per", time.Second, "the rate limit's window")
	fs.BoolVar(&fl.breaker, "breaker", false, "give the no-op kind a circuit breaker (an hour's cool-down: opened and closed by hand)")
	fs.BoolVar(&fl.ride, "outcomes-with-claims", false, "Config.OutcomesWithClaims")
	fs.BoolVar(&fl.starts, "starts", false, "record each start's claim, run_at and host start")
	if len(args) > 0 && args[0] == "worker" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runWorker(*dsn, *workers, *conns, *lags, *cpuProfile, fl, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "axbench worker:", err)
		return 1
	}
	return 0
}

// workerFlow are a worker's flow options for the no-op kind.
type workerFlow struct {
	global, rate int
	ratePer      time.Duration
	breaker      bool
	starts       bool
	ride         bool // Config.OutcomesWithClaims
}

// options returns the handler options the flags ask for.
func (f workerFlow) options() []ax.HandlerOption {
	var opts []ax.HandlerOption
	if f.global > 0 {
		opts = append(opts, ax.GlobalConcurrency(f.global))
	}
	if f.rate > 0 {
		opts = append(opts, ax.RateLimit(f.rate, f.ratePer))
	}
	if f.breaker {
		opts = append(opts, ax.CircuitBreaker(ax.BreakerConfig{CoolDown: time.Hour}))
	}
	return opts
}

// args returns the worker flags of f.
func (f workerFlow) args() []string {
	var a []string
	if f.global > 0 {
		a = append(a, "-global", strconv.Itoa(f.global))
	}
	if f.rate > 0 {
		a = append(a, "-rate", strconv.Itoa(f.rate), "-rate-per", f.ratePer.String())
	}
	if f.breaker {
		a = append(a, "-breaker")
	}
	if f.starts {
		a = append(a, "-starts")
	}
	return a
}

func runWorker(dsn string, workers, conns int, recordLags bool, cpuProfile string, fl workerFlow, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	pool, err := newPool(ctx, dsn, conns, "axbench-worker")
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pgstore.New(ctx, pool)
	if err != nil {
		return err
	}
	defer st.Close()
	var claims *claimTimes // nil records nothing
	counter := &claimCounter{Store: st, claim: st.Claim}
	if fl.starts {
		claims = &claimTimes{Store: st}
		counter.claim = claims.Claim
	}
	var axStore store.Store = counter
	s, err := ax.New(ax.Config{Store: axStore, Workers: workers, OutcomesWithClaims: fl.ride})
	if err != nil {
		return err
	}
	var (
		count, last, early atomic.Int64
		mu                 sync.Mutex
		lagsUS             []int64
		starts             []startRecord
		claimToStart       waitHist
		highLag            waitHist
	)
	if recordLags {
		lagsUS = make([]int64, 0, 1<<16)
	}
	err = s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		count.Add(1)
		at := time.Now()
		now := at.UnixNano()
		last.Store(now)
		claimToStart.record(at.Sub(j.StartedAt))
		if j.Priority == ax.High { // a probe (probe.go)
			highLag.record(at.Sub(j.RunAt))
		}
		if fl.starts {
			mu.Lock()
			call := claims.of(j.ID)
			starts = append(starts, startRecord{j.StartedAt.UnixMicro(), j.RunAt.UnixMicro(), now, call.begin, call.end})
			mu.Unlock()
		}
		if lag := j.ClaimLag(); lag < 0 {
			early.Add(1)
		}
		if recordLags {
			mu.Lock()
			lagsUS = append(lagsUS, j.ClaimLag().Microseconds())
			mu.Unlock()
		}
		return nil
	}), fl.options()...)
	if err != nil {
		return err
	}
	lines := bufio.NewScanner(in)
	fmt.Fprintln(out, "ready")
	if !lines.Scan() || lines.Text() != "go" {
		return errors.New("no go")
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	u0, s0 := cpuTime()
	if err := s.Start(ctx); err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() { // wait for "stop" or end of input
		for lines.Scan() && lines.Text() != "stop" {
		}
		close(stopped)
	}()
	var peak int64
	tick := time.NewTicker(25 * time.Millisecond)
	reported := int64(-1)
loop:
	for i := 0; ; i++ {
		select {
		case <-stopped:
			break loop
		case <-tick.C:
		}
		if n := count.Load(); n != reported {
			fmt.Fprintf(out, "progress %d\n", n)
			reported = n
		}
		if i%4 == 0 {
			rss, _ := memStatus()
			peak = max(peak, rss)
		}
	}
	tick.Stop()
	rss, _ := memStatus()
	if err := stopScheduler(s); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	stoppedAt := time.Now().UnixNano()
	u1, s1 := cpuTime()
	_, hwm := memStatus()
	mu.Lock()
	res := workerResult{Count: count.Load(), LastNS: last.Load(), StopNS: stoppedAt, UserS: (u1 - u0).Seconds(), SysS: (s1 - s0).Seconds(),
		RSSKB: rss, PeakKB: max(peak, rss), HWMKB: hwm, LagsUS: lagsUS, EarlyCnt: early.Load(), Starts: starts, Claims: counter.counts(),
		ClaimToStart: claimToStart.snapshot(), HighLag: highLag.snapshot()}
	b, err := json.Marshal(res)
	mu.Unlock()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "result %s\n", b)
	return err
}

// worker is a worker process seen from the benchmark.
type worker struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	progress atomic.Int64
	ready    chan struct{}
	result   chan workerResult
	exited   chan error
}

// startWorker starts a worker process on dsn and waits until it is ready.
func (b *bench) startWorker(ctx context.Context, dsn string, workers int, lags bool, idx int, extra ...string) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"worker", "-dsn", dsn, "-workers", strconv.Itoa(workers), "-conns", strconv.Itoa(b.opt.conns)}, extra...)
	if lags {
		args = append(args, "-lags")
	}
	if b.opt.ride {
		args = append(args, "-outcomes-with-claims")
	}
	if b.opt.cpuProfile != "" {
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.worker%d", b.opt.cpuProfile, idx))
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = b.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, stdin: stdin, ready: make(chan struct{}), result: make(chan workerResult, 1), exited: make(chan error, 1)}
	go w.read(stdout)
	select {
	case <-w.ready:
		return w, nil
	case err := <-w.exited:
		return nil, fmt.Errorf("worker exited before ready: %v", err)
	case <-ctx.Done():
		w.kill()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		w.kill()
		return nil, errors.New("worker not ready after 30s")
	}
}

func (w *worker) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			close(w.ready)
		case strings.HasPrefix(line, "progress "):
			n, _ := strconv.ParseInt(strings.TrimPrefix(line, "progress "), 10, 64)
			w.progress.Store(n)
		case strings.HasPrefix(line, "result "):
			var r workerResult
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &r); err == nil {
				w.result <- r
			}
		}
	}
	w.exited <- w.cmd.Wait()
}

// start tells the worker to start its Scheduler.
func (w *worker) start() error {
	_, err := io.WriteString(w.stdin, "go\n")
	return err
}

// stop stops the worker's Scheduler and returns its report.
func (w *worker) stop() (workerResult, error) {
	_, _ = io.WriteString(w.stdin, "stop\n")
	_ = w.stdin.Close()
	select {
	case r := <-w.result:
		<-w.exited
		return r, nil
	case err := <-w.exited:
		return workerResult{}, fmt.Errorf("worker exited without a result: %v", err)
	case <-time.After(60 * time.Second):
		w.kill()
		return workerResult{}, errors.New("worker did not stop within 60s")
	}
}

func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
}
