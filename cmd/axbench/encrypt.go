package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax"
)

// throughput -encrypt: the cost of encryption at rest (ax.Config.Keys).
// Each worker count runs the same N jobs with 1 KB payloads, plain and
// sealed (AES-256-GCM: sealed at Schedule, opened before the handler,
// bigger rows in the table), alternately -encrypt-reps times, on an
// emptied table each time; the medians are compared.

// encryptOptions are the flags of this file, part of options (a run's
// own: tests parse flags for several runs at once).
type encryptOptions struct {
	encryptCompare bool
	encryptReps    int
	encryptBytes   int
}

// registerEncrypt adds the flags of this file.
func (e *encryptOptions) registerEncrypt(fs *flag.FlagSet) {
	fs.BoolVar(&e.encryptCompare, "encrypt", false, "throughput: run 1 KB payloads plain and encrypted at rest (Config.Keys), alternately, and print the cost per job")
	fs.IntVar(&e.encryptBytes, "encrypt-bytes", 1024, "throughput -encrypt: payload size in bytes (its JSON text; at least 128); over about 1,400 a sealed row passes PostgreSQL's 2 KB TOAST threshold")
	fs.IntVar(&e.encryptReps, "encrypt-reps", 3, "throughput -encrypt: runs of each mode per worker count (the median counts)")
}

// encryptPayload is a job payload whose JSON is size bytes (1 KB by
// default).
func encryptPayload(size int) json.RawMessage {
	head := `{"to":"ada@example.com","subject":"Your order","body":"`
	tail := `"}`
	return json.RawMessage(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}

// encryptRun is one measured run.
type encryptRun struct {
	rate, cpuPer1k float64 // jobs/s (Start → Stop), CPU s per 1k jobs
	insert         float64 // ScheduleMany jobs/s
	// insertCPU is this process's CPU s per 1k jobs in the insert
	// (sealing included).
	insertCPU float64
	// srvPer1k is the server's CPU s per 1k jobs over the insert and the
	// run (-1: not measured), every process of the server; backendPer1k
	// that of the run's own backends only (-1: not measured), steadier
	// on a shared server; wal the WAL bytes per job, cluster-wide.
	srvPer1k, backendPer1k, wal float64
	// payload and row are the mean stored sizes (pg_column_size) of a
	// finished job's payload and whole row; compressed is how many of
	// the payloads the server stored compressed.
	payload, row float64
	compressed   int64
	// allocPerJob is the bytes this process allocated per job in the run,
	// gcs its garbage collections in the run.
	allocPerJob float64
	gcs         uint32
}

func runThroughputEncrypt(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	encryptReps := b.opt.encryptReps
	if encryptReps < 1 {
		return nil, fmt.Errorf("-encrypt-reps %d < 1", encryptReps)
	}
	if o.encryptBytes < 128 || o.encryptBytes > 64<<10 {
		return nil, fmt.Errorf("-encrypt-bytes %d: want 128 to 65536", o.encryptBytes)
	}
	r := newResult(map[string]any{"n": o.n, "workers": o.workers, "conns": connsParam(o.conns), "payload_bytes": o.encryptBytes,
		"encrypt_reps": encryptReps, "cipher": "AES-256-GCM"})
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	key, err := ax.GenerateKey("bench")
	if err != nil {
		return nil, err
	}
	ring, err := ax.NewKeyRing(key)
	if err != nil {
		return nil, err
	}
	payload := encryptPayload(o.encryptBytes)
	srv, srvErr := newServerClock(ctx, d)
	if srvErr != nil {
		r.note("server CPU: not measured (%v)", srvErr)
	}
	t := table{Title: fmt.Sprintf("%d-byte payloads, plain vs encrypted (medians)", o.encryptBytes), Columns: []string{"workers", "mode", "insert jobs/s", "jobs/s",
		"insert CPU s/1k", "CPU s/1k jobs", "backends CPU s/1k", "server CPU s/1k", "WAL B/job", "payload B", "row B", "compressed", "alloc B/job", "GCs", "runs (jobs/s)"}}
	for _, w := range o.workerList {
		runs := map[bool][]encryptRun{}
		for rep := range encryptReps {
			for _, enc := range []bool{rep%2 == 1, rep%2 == 0} { // alternate which mode goes first
				run, err := encryptOnce(ctx, b, d, srv, w, enc, ring, payload)
				if err != nil {
					return nil, err
				}
				runs[enc] = append(runs[enc], run)
			}
		}
		plain, sealed := medianRun(runs[false]), medianRun(runs[true])
		for _, m := range []struct {
			name string
			enc  bool
			run  encryptRun
		}{{"plain", false, plain}, {"encrypted", true, sealed}} {
			var rates []string
			for _, x := range runs[m.enc] {
				rates = append(rates, fmt.Sprintf("%.0f", x.rate))
			}
			med := func(f func(encryptRun) float64) string {
				if v := medianOf(runs[m.enc], f); v >= 0 {
					return fmt.Sprintf("%.3f", v)
				}
				return "-"
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(w), m.name, fmt.Sprintf("%.0f", m.run.insert), fmt.Sprintf("%.0f", m.run.rate),
				med(func(x encryptRun) float64 { return x.insertCPU }), med(func(x encryptRun) float64 { return x.cpuPer1k }),
				med(func(x encryptRun) float64 { return x.backendPer1k }), med(func(x encryptRun) float64 { return x.srvPer1k }),
				fmt.Sprintf("%.0f", medianOf(runs[m.enc], func(x encryptRun) float64 { return x.wal })),
				fmt.Sprintf("%.0f", m.run.payload), fmt.Sprintf("%.0f", m.run.row), fmt.Sprint(m.run.compressed),
				fmt.Sprintf("%.0f", medianOf(runs[m.enc], func(x encryptRun) float64 { return x.allocPerJob })),
				fmt.Sprintf("%.0f", medianOf(runs[m.enc], func(x encryptRun) float64 { return float64(x.gcs) })), strings.Join(rates, " ")})
		}
		cpuPlain := medianOf(runs[false], func(x encryptRun) float64 { return x.cpuPer1k })
		cpuSealed := medianOf(runs[true], func(x encryptRun) float64 { return x.cpuPer1k })
		loss := 100 * (1 - sealed.rate/plain.rate)
		r.atMost(fmt.Sprintf("W=%d: jobs/s lost to encryption", w), loss, "%", 10)
		r.add(fmt.Sprintf("W=%d: wall time per job, encrypted minus plain", w), (1/sealed.rate-1/plain.rate)*1e6, "µs")
		r.add(fmt.Sprintf("W=%d: CPU per job, encrypted minus plain (medians)", w), (cpuSealed-cpuPlain)*1e3, "µs")
		insPlain := medianOf(runs[false], func(x encryptRun) float64 { return x.insertCPU })
		insSealed := medianOf(runs[true], func(x encryptRun) float64 { return x.insertCPU })
		r.add(fmt.Sprintf("W=%d: insert CPU per job, encrypted minus plain (medians)", w), (insSealed-insPlain)*1e3, "µs")
		if bePlain := medianOf(runs[false], func(x encryptRun) float64 { return x.backendPer1k }); bePlain >= 0 {
			beSealed := medianOf(runs[true], func(x encryptRun) float64 { return x.backendPer1k })
			r.add(fmt.Sprintf("W=%d: backends' CPU per job (insert and run), encrypted minus plain (medians)", w), (beSealed-bePlain)*1e3, "µs")
		}
		if srv != nil {
			srvPlain := medianOf(runs[false], func(x encryptRun) float64 { return x.srvPer1k })
			srvSealed := medianOf(runs[true], func(x encryptRun) float64 { return x.srvPer1k })
			r.add(fmt.Sprintf("W=%d: server CPU per job, encrypted minus plain (medians)", w), (srvSealed-srvPlain)*1e3, "µs")
		}
		r.add(fmt.Sprintf("W=%d: plain jobs/s", w), plain.rate, "jobs/s")
		r.add(fmt.Sprintf("W=%d: encrypted jobs/s", w), sealed.rate, "jobs/s")
	}
	r.Tables = append(r.Tables, t)
	r.note("jobs/s: N / (Start → Stop returned, every outcome written); CPU: user+sys of this process from Start to Stop; insert: ScheduleMany of N in batches of 1000 (sealing included for encrypted)")
	r.note("insert CPU: user+sys of this process in the insert; backends CPU: user+sys of the run's own PostgreSQL backends (insert and run; without the WAL writer and checkpointer); server CPU: user+sys of every PostgreSQL process over the insert and the run (on a shared server, other clients' work too); WAL: bytes written cluster-wide over the same span, per job (other clients' too)")
	r.note("alloc B/job, GCs: bytes this process allocated per job, and its garbage collections, in the run (Start to Stop)")
	r.note("payload B, row B: mean pg_column_size of the finished jobs' payload and row; compressed: payloads the server stored compressed (pg_column_compression)")
	r.note("jobs/s and insert columns are the median run's; CPU, server CPU and WAL columns are medians of their own (the steadier figures on a loaded machine)")
	r.note("modes alternate so that neither always runs on a warmer server; each run's goroutines carry the pprof label mode=plain|encrypted (-cpuprofile, then go tool pprof -tagfocus)")
	return r, nil
}

// encryptOnce schedules N jobs with payload (sealed with ring when enc)
// on an emptied table and runs them with W workers.
func encryptOnce(ctx context.Context, b *bench, d *benchDB, srv *serverClock, w int, enc bool, ring *ax.KeyRing, payload json.RawMessage) (run encryptRun, err error) {
	mode := map[bool]string{false: "plain", true: "encrypted"}[enc]
	// Goroutines started below (the pool's, the Scheduler's) inherit the
	// label, so a CPU profile splits by mode.
	pprof.Do(ctx, pprof.Labels("mode", mode), func(ctx context.Context) {
		run, err = encryptLabeled(ctx, b, d, srv, w, enc, ring, payload)
	})
	return run, err
}

func encryptLabeled(ctx context.Context, b *bench, d *benchDB, srv *serverClock, w int, enc bool, ring *ax.KeyRing, payload json.RawMessage) (encryptRun, error) {
	o := b.opt
	mode := map[bool]string{false: "plain", true: "encrypted"}[enc]
	if err := d.truncate(ctx); err != nil {
		return encryptRun{}, err
	}
	if err := d.settle(ctx); err != nil {
		return encryptRun{}, err
	}
	lsn, err := d.walPosition(ctx)
	if err != nil {
		return encryptRun{}, err
	}
	srv0 := serverCPU(srv)
	sess, err := d.openSession(ctx, o.conns, "axbench-run")
	if err != nil {
		return encryptRun{}, err
	}
	defer sess.close()
	cfg := ax.Config{Store: sess.store, Workers: w, DisableDirectStart: o.noDirect}
	if enc {
		cfg.Keys = ring
	}
	s, err := ax.New(cfg)
	if err != nil {
		return encryptRun{}, err
	}
	c := newCounter(o.n)
	if err := s.Handle(noopKind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
		if len(j.Payload) != len(payload) {
			return ax.Permanent(fmt.Errorf("payload of %d bytes, want %d", len(j.Payload), len(payload)))
		}
		c.inc()
		return nil
	})); err != nil {
		return encryptRun{}, err
	}
	reqs := make([]ax.Request, min(o.n, 1000))
	for i := range reqs {
		reqs[i] = ax.Request{Kind: noopKind, Payload: payload}
	}
	cpu0, start := cpuTotal(), time.Now()
	for done := 0; done < o.n; {
		k := min(len(reqs), o.n-done)
		if _, err := s.ScheduleMany(ctx, reqs[:k]); err != nil {
			return encryptRun{}, err
		}
		done += k
	}
	insert := float64(o.n) / time.Since(start).Seconds()
	insertCPU := cpuTotal() - cpu0
	var mem0, mem1 goruntime.MemStats
	goruntime.ReadMemStats(&mem0)
	cpu0, start = cpuTotal(), time.Now()
	if err := s.Start(ctx); err != nil {
		return encryptRun{}, err
	}
	waitErr := b.wait(ctx, fmt.Sprintf("throughput -encrypt W=%d %s", w, mode), c, 10*time.Minute)
	stopErr := stopScheduler(s)
	took, cpu, srvCPU := time.Since(start), cpuTotal()-cpu0, serverCPU(srv)-srv0
	goruntime.ReadMemStats(&mem1)
	if waitErr != nil {
		return encryptRun{}, waitErr
	}
	if stopErr != nil {
		return encryptRun{}, fmt.Errorf("stop: %w", stopErr)
	}
	ok, err := d.count(ctx, "SELECT count(*) FROM {alljobs} WHERE state = 'succeeded' AND attempt = 1")
	if err != nil {
		return encryptRun{}, err
	}
	if ok != int64(o.n) {
		return encryptRun{}, fmt.Errorf("W=%d %s: %d of %d jobs succeeded at attempt 1", w, mode, ok, o.n)
	}
	per1k := func(d time.Duration) float64 { return d.Seconds() / (float64(o.n) / 1000) }
	run := encryptRun{rate: float64(o.n) / took.Seconds(), cpuPer1k: per1k(cpu), insert: insert, insertCPU: per1k(insertCPU),
		srvPer1k: -1, backendPer1k: -1, allocPerJob: float64(mem1.TotalAlloc-mem0.TotalAlloc) / float64(o.n), gcs: mem1.NumGC - mem0.NumGC}
	if srv != nil {
		run.srvPer1k = per1k(srvCPU)
		if be, err := sessionBackendsCPU(ctx, d); err == nil {
			run.backendPer1k = per1k(be)
		}
	}
	wal, err := d.walSince(ctx, lsn)
	if err != nil {
		return encryptRun{}, err
	}
	run.wal = float64(wal) / float64(o.n)
	err = d.pool.QueryRow(ctx, d.sub(`SELECT avg(pg_column_size(payload)), avg(pg_column_size(j.*)),
		count(*) FILTER (WHERE pg_column_compression(payload) IS NOT NULL) FROM {alljobs} j`)).Scan(&run.payload, &run.row, &run.compressed)
	if err != nil {
		return encryptRun{}, fmt.Errorf("row sizes: %w", err)
	}
	return run, nil
}

// medianOf returns the median of f over runs.
func medianOf(runs []encryptRun, f func(encryptRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, x := range runs {
		v[i] = f(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// medianRun returns the run of median rate.
func medianRun(runs []encryptRun) encryptRun {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b encryptRun) int {
		switch {
		case a.rate < b.rate:
			return -1
		case a.rate > b.rate:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// walPosition returns the cluster's WAL insert position, for walSince.
func (d *benchDB) walPosition(ctx context.Context) (string, error) {
	var lsn string
	if err := d.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return "", fmt.Errorf("read WAL position: %w", err)
	}
	return lsn, nil
}

// sessionBackendsCPU returns the CPU time of the run's backends (the
// session's pool, application axbench-run, opened for the run: all of
// their time is the run's), read before the session closes them. The
// server must be on this machine.
func sessionBackendsCPU(ctx context.Context, d *benchDB) (time.Duration, error) {
	rows, err := d.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'axbench-run'`)
	if err != nil {
		return 0, fmt.Errorf("run backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("run backends: %w", err)
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("run backends: none found")
	}
	var ticks int64
	for _, pid := range pids {
		f, err := procStat(pid)
		if err != nil {
			return 0, fmt.Errorf("run backend %d: %w", pid, err)
		}
		ticks += f.utime + f.stime
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
