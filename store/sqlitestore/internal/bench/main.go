//go:build unix

// Command bench measures AX on the embedded SQLite store beside PostgreSQL,
// with the same scenarios and the same Scheduler configuration, and prints
// the figures (nothing is asserted):
//
//	go run ./store/sqlitestore/internal/bench                   # SQLite, synchronous FULL and NORMAL
//	go run ./store/sqlitestore/internal/bench -pg postgres://…  # and PostgreSQL, in a fresh schema
//
// Scenarios, each on a fresh database:
//
//   - insert-many: ScheduleMany of -jobs no-op jobs in batches of 10,000,
//     and the process's CPU time per 1,000 jobs (all of SQLite's work; the
//     client's only with PostgreSQL), which machine load disturbs less
//     than the rate.
//   - insert-one: Schedule of 2,000 jobs one at a time: latency p50 / p99.
//   - throughput: -jobs due no-op jobs run by one Scheduler with 100
//     workers, every outcome written: jobs/s from Start to the last
//     outcome written.
//   - lag: -lag-jobs jobs scheduled with ax.At uniformly 1–6 s ahead, with
//     the Scheduler running: start lag, the handler's first instruction
//     minus the job's run time (host clock), p50 / p99 / max.
//   - immediate: 300 jobs/s scheduled one at a time for 3 s: from before
//     Schedule to the handler's start, p50 / p99 / max.
//   - backlog: Store.Claim of 100 due low-priority jobs, p50 of 20 claims,
//     on an empty store, then with 100,000 high-priority jobs an hour
//     ahead, then with 50,000 finished jobs too.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

func main() {
	var (
		pg      = flag.String("pg", "", "PostgreSQL DSN: run the scenarios there too, in a fresh schema")
		jobs    = flag.Int("jobs", 50_000, "jobs of the insert-many and throughput scenarios")
		lagJobs = flag.Int("lag-jobs", 2_000, "jobs of the lag scenario")
		only    = flag.String("only", "", "run only this scenario")
		profile = flag.String("cpuprofile", "", "write a CPU profile to this file")
	)
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	targets := []target{
		{"sqlite (synchronous=FULL)", sqliteStore()},
		{"sqlite (synchronous=NORMAL)", sqliteStore(sqlitestore.WithSyncNormal())},
	}
	if *pg != "" {
		targets = append(targets, target{"postgresql", pgStore(*pg)})
	}
	fmt.Printf("%-28s %-12s %s\n", "store", "scenario", "figure")
	for _, tg := range targets {
		for _, sc := range []struct {
			name string
			run  func(ctx context.Context, st store.Store) (string, error)
		}{
			{"insert-many", func(ctx context.Context, st store.Store) (string, error) { return insertMany(ctx, st, *jobs) }},
			{"insert-one", insertOne},
			{"throughput", func(ctx context.Context, st store.Store) (string, error) { return throughput(ctx, st, *jobs) }},
			{"lag", func(ctx context.Context, st store.Store) (string, error) { return lag(ctx, st, *lagJobs) }},
			{"immediate", immediate},
			{"backlog", backlog},
		} {
			if *only != "" && sc.name != *only {
				continue
			}
			st, done, err := tg.open(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", tg.name, err)
				os.Exit(1)
			}
			fig, err := sc.run(ctx, st)
			done()
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", tg.name, sc.name, err)
				return
			}
			fmt.Printf("%-28s %-12s %s\n", tg.name, sc.name, fig)
		}
	}
}

// target opens a fresh store and returns a function that closes and
// removes it.
type target struct {
	name string
	open func(ctx context.Context) (store.Store, func(), error)
}

func sqliteStore(opts ...sqlitestore.Option) func(ctx context.Context) (store.Store, func(), error) {
	return func(ctx context.Context) (store.Store, func(), error) {
		dir, err := os.MkdirTemp("", "ax-sqlite-bench-")
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlitestore.Open(ctx, filepath.Join(dir, "bench.db"), opts...)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close(); _ = os.RemoveAll(dir) }, nil
	}
}

func pgStore(dsn string) func(ctx context.Context) (store.Store, func(), error) {
	return func(ctx context.Context) (store.Store, func(), error) {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		schema := "ax_sqlite_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		st, err := pgstore.New(ctx, pool, pgstore.WithSchema(schema))
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return st, func() {
			_ = st.Close()
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			pool.Close()
		}, nil
	}
}

const kind = "noop"

func newScheduler(st store.Store) (*ax.Scheduler, error) {
	return ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
}

func insertMany(ctx context.Context, st store.Store, n int) (string, error) {
	s, err := newScheduler(st)
	if err != nil {
		return "", err
	}
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind, Payload: json.RawMessage(`{}`), Options: []ax.ScheduleOption{ax.In(time.Hour)}}
	}
	start, cpu0 := time.Now(), cpuTime()
	for i := 0; i < n; i += 10_000 {
		if _, err := s.ScheduleMany(ctx, reqs[i:min(i+10_000, n)]); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%.0f jobs/s, %.3f s CPU per 1k jobs (ScheduleMany of %d in batches of 10k)",
		float64(n)/time.Since(start).Seconds(), (cpuTime()-cpu0).Seconds()*1000/float64(n), n), nil
}

func insertOne(ctx context.Context, st store.Store) (string, error) {
	s, err := newScheduler(st)
	if err != nil {
		return "", err
	}
	var lat []time.Duration
	for range 2000 {
		t0 := time.Now()
		if _, err := s.Schedule(ctx, kind, json.RawMessage(`{}`), ax.In(time.Hour)); err != nil {
			return "", err
		}
		lat = append(lat, time.Since(t0))
	}
	return fmt.Sprintf("Schedule p50 %s / p99 %s", pct(lat, 50), pct(lat, 99)), nil
}

func throughput(ctx context.Context, st store.Store, n int) (string, error) {
	s, err := newScheduler(st)
	if err != nil {
		return "", err
	}
	reqs := make([]ax.Request, n)
	for i := range reqs {
		reqs[i] = ax.Request{Kind: kind, Payload: json.RawMessage(`{}`)}
	}
	for i := 0; i < n; i += 10_000 {
		if _, err := s.ScheduleMany(ctx, reqs[i:min(i+10_000, n)]); err != nil {
			return "", err
		}
	}
	var ran atomic.Int64
	if err := s.Handle(kind, ax.HandlerFunc(func(context.Context, *ax.Job) error { ran.Add(1); return nil })); err != nil {
		return "", err
	}
	start, cpu0 := time.Now(), cpuTime()
	if err := s.Start(ctx); err != nil {
		return "", err
	}
	for ran.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	if err := waitSucceeded(ctx, st, n); err != nil {
		return "", err
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	if err := stop(s); err != nil {
		return "", err
	}
	return fmt.Sprintf("%.0f no-op jobs/s, %.3f s CPU per 1k jobs (%d jobs, 100 workers, every outcome written)",
		float64(n)/elapsed.Seconds(), cpu.Seconds()*1000/float64(n), n), nil
}

// waitSucceeded waits until n jobs are recorded succeeded.
func waitSucceeded(ctx context.Context, st store.Store, n int) error {
	c := st.(store.Counter)
	for {
		counts, err := c.CountJobs(ctx)
		if err != nil {
			return err
		}
		var ok int64
		for _, sc := range counts {
			if sc.State == store.StateSucceeded {
				ok += sc.Count
			}
		}
		if ok >= int64(n) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

func lag(ctx context.Context, st store.Store, n int) (string, error) {
	s, err := newScheduler(st)
	if err != nil {
		return "", err
	}
	var (
		mu   sync.Mutex
		lags []time.Duration
	)
	err = s.Handle(kind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		ns, err := strconv.ParseInt(string(j.Payload), 10, 64)
		if err != nil {
			return ax.Permanent(err)
		}
		mu.Lock()
		lags = append(lags, now.Sub(time.Unix(0, ns)))
		mu.Unlock()
		return nil
	}))
	if err != nil {
		return "", err
	}
	if err := s.Start(ctx); err != nil {
		return "", err
	}
	base := time.Now()
	reqs := make([]ax.Request, n)
	for i := range reqs {
		at := base.Add(time.Second + rand.N(5*time.Second))
		reqs[i] = ax.Request{Kind: kind, Payload: json.RawMessage(strconv.FormatInt(at.UnixNano(), 10)), Options: []ax.ScheduleOption{ax.At(at)}}
	}
	if _, err := s.ScheduleMany(ctx, reqs); err != nil {
		return "", err
	}
	for {
		mu.Lock()
		got := len(lags)
		mu.Unlock()
		if got == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(s); err != nil {
		return "", err
	}
	early := 0
	for _, l := range lags {
		if l < 0 {
			early++
		}
	}
	return fmt.Sprintf("start lag p50 %s / p99 %s / max %s, %d early (%d jobs 1–6 s ahead)", pct(lags, 50), pct(lags, 99), pct(lags, 100), early, n), nil
}

func immediate(ctx context.Context, st store.Store) (string, error) {
	s, err := newScheduler(st)
	if err != nil {
		return "", err
	}
	const rate, seconds = 300, 3
	var (
		mu   sync.Mutex
		lags []time.Duration
	)
	err = s.Handle(kind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		now := time.Now()
		ns, err := strconv.ParseInt(string(j.Payload), 10, 64)
		if err != nil {
			return ax.Permanent(err)
		}
		mu.Lock()
		lags = append(lags, now.Sub(time.Unix(0, ns)))
		mu.Unlock()
		return nil
	}))
	if err != nil {
		return "", err
	}
	if err := s.Start(ctx); err != nil {
		return "", err
	}
	tick := time.NewTicker(time.Second / rate)
	for range rate * seconds {
		<-tick.C
		if _, err := s.Schedule(ctx, kind, json.RawMessage(strconv.FormatInt(time.Now().UnixNano(), 10))); err != nil {
			tick.Stop()
			return "", err
		}
	}
	tick.Stop()
	for {
		mu.Lock()
		got := len(lags)
		mu.Unlock()
		if got == rate*seconds {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(s); err != nil {
		return "", err
	}
	return fmt.Sprintf("insert-to-start p50 %s / p99 %s / max %s (%d/s one at a time)", pct(lags, 50), pct(lags, 99), pct(lags, 100), rate), nil
}

func stop(s *ax.Scheduler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Stop(ctx)
}

// pct returns the p-th percentile of ds, rounded for printing.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p)/100)
	return s[i].Round(10 * time.Microsecond)
}

func backlog(ctx context.Context, st store.Store) (string, error) {
	claim100 := func() (time.Duration, error) {
		var lat []time.Duration
		for range 20 {
			ps := make([]store.InsertParams, 100)
			for i := range ps {
				ps[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "due", Payload: json.RawMessage(`{}`),
					Priority: store.PriorityLow, MaxAttempts: 1}
			}
			if _, err := st.Insert(ctx, ps); err != nil {
				return 0, err
			}
			t0 := time.Now()
			res, err := st.Claim(ctx, &store.ClaimParams{Owner: "bench", Kinds: []store.KindLimit{{Kind: "due", Limit: 100}, {Kind: "future", Limit: 100}},
				Limit: 100, LeaseDuration: time.Hour})
			if err != nil {
				return 0, err
			}
			lat = append(lat, time.Since(t0))
			if len(res.Jobs) != 100 {
				return 0, fmt.Errorf("claimed %d, want 100", len(res.Jobs))
			}
		}
		return pct(lat, 50), nil
	}
	insert := func(kind string, n int, prio int, delay time.Duration) error {
		for i := 0; i < n; i += 10_000 {
			ps := make([]store.InsertParams, min(10_000, n-i))
			for k := range ps {
				ps[k] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: kind, Payload: json.RawMessage(`{}`),
					Priority: prio, MaxAttempts: 1, Delay: delay}
			}
			if _, err := st.Insert(ctx, ps); err != nil {
				return err
			}
		}
		return nil
	}
	empty, err := claim100()
	if err != nil {
		return "", err
	}
	if err := insert("future", 100_000, store.PriorityHigh, time.Hour); err != nil {
		return "", err
	}
	future, err := claim100()
	if err != nil {
		return "", err
	}
	if err := insert("done", 50_000, store.PriorityNormal, 0); err != nil {
		return "", err
	}
	for {
		res, err := st.Claim(ctx, &store.ClaimParams{Owner: "bench", Kinds: []store.KindLimit{{Kind: "done", Limit: 1000}}, Limit: 1000, LeaseDuration: time.Hour})
		if err != nil {
			return "", err
		}
		if len(res.Jobs) == 0 {
			break
		}
		fps := make([]store.FinishParams, len(res.Jobs))
		for i, j := range res.Jobs {
			fps[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeSucceeded}
		}
		if _, err := st.Finish(ctx, fps); err != nil {
			return "", err
		}
	}
	finished, err := claim100()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Claim of 100 p50: empty %s / 100k future %s / 100k future + 50k finished %s", empty, future, finished), nil
}

// cpuTime returns the CPU time (user and system) this process used so far:
// with SQLite, all of the store's work; with PostgreSQL, the client's only.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
