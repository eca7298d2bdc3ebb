package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

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
}

// registerEncrypt adds the flags of this file.
func (e *encryptOptions) registerEncrypt(fs *flag.FlagSet) {
	fs.BoolVar(&e.encryptCompare, "encrypt", false, "throughput: run 1 KB payloads plain and encrypted at rest (Config.Keys), alternately, and print the cost per job")
	fs.IntVar(&e.encryptReps, "encrypt-reps", 3, "throughput -encrypt: runs of each mode per worker count (the median counts)")
}

// encryptPayload is a 1 KB job payload (its JSON is 1,024 bytes).
func encryptPayload() json.RawMessage {
	head := `{"to":"ada@example.com","subject":"Your order","body":"`
	tail := `"}`
	return json.RawMessage(head + strings.Repeat("x", 1024-len(head)-len(tail)) + tail)
}

// encryptRun is one measured run.
type encryptRun struct {
	rate, cpuPer1k float64 // jobs/s (Start → Stop), CPU s per 1k jobs
	insert         float64 // ScheduleMany jobs/s
}

func runThroughputEncrypt(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	encryptReps := b.opt.encryptReps
	if encryptReps < 1 {
		return nil, fmt.Errorf("-encrypt-reps %d < 1", encryptReps)
	}
	r := newResult(map[string]any{"n": o.n, "workers": o.workers, "conns": connsParam(o.conns), "payload_bytes": 1024,
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
	payload := encryptPayload()
	t := table{Title: "1 KB payloads, plain vs encrypted (medians)", Columns: []string{"workers", "mode", "insert jobs/s", "jobs/s", "CPU s/1k jobs", "runs (jobs/s)"}}
	for _, w := range o.workerList {
		runs := map[bool][]encryptRun{}
		for rep := range encryptReps {
			for _, enc := range []bool{rep%2 == 1, rep%2 == 0} { // alternate which mode goes first
				run, err := encryptOnce(ctx, b, d, w, enc, ring, payload)
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
			t.Rows = append(t.Rows, []string{fmt.Sprint(w), m.name, fmt.Sprintf("%.0f", m.run.insert), fmt.Sprintf("%.0f", m.run.rate),
				fmt.Sprintf("%.3f", m.run.cpuPer1k), strings.Join(rates, " ")})
		}
		loss := 100 * (1 - sealed.rate/plain.rate)
		r.atMost(fmt.Sprintf("W=%d: jobs/s lost to encryption", w), loss, "%", 10)
		r.add(fmt.Sprintf("W=%d: wall time per job, encrypted minus plain", w), (1/sealed.rate-1/plain.rate)*1e6, "µs")
		r.add(fmt.Sprintf("W=%d: CPU per job, encrypted minus plain", w), (sealed.cpuPer1k-plain.cpuPer1k)*1e3, "µs")
		r.add(fmt.Sprintf("W=%d: plain jobs/s", w), plain.rate, "jobs/s")
		r.add(fmt.Sprintf("W=%d: encrypted jobs/s", w), sealed.rate, "jobs/s")
	}
	r.Tables = append(r.Tables, t)
	r.note("jobs/s: N / (Start → Stop returned, every outcome written); CPU: user+sys of this process from Start to Stop; insert: ScheduleMany of N in batches of 1000 (sealing included for encrypted)")
	r.note("each row is the median of -encrypt-reps runs; modes alternate so that neither always runs on a warmer server")
	return r, nil
}

// encryptOnce schedules N jobs with payload (sealed with ring when enc)
// on an emptied table and runs them with W workers.
func encryptOnce(ctx context.Context, b *bench, d *benchDB, w int, enc bool, ring *ax.KeyRing, payload json.RawMessage) (encryptRun, error) {
	o := b.opt
	if err := d.truncate(ctx); err != nil {
		return encryptRun{}, err
	}
	if err := d.settle(ctx); err != nil {
		return encryptRun{}, err
	}
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
	start := time.Now()
	for done := 0; done < o.n; {
		k := min(len(reqs), o.n-done)
		if _, err := s.ScheduleMany(ctx, reqs[:k]); err != nil {
			return encryptRun{}, err
		}
		done += k
	}
	insert := float64(o.n) / time.Since(start).Seconds()
	cpu0, start := cpuTotal(), time.Now()
	if err := s.Start(ctx); err != nil {
		return encryptRun{}, err
	}
	mode := map[bool]string{false: "plain", true: "encrypted"}[enc]
	waitErr := b.wait(ctx, fmt.Sprintf("throughput -encrypt W=%d %s", w, mode), c, 10*time.Minute)
	stopErr := stopScheduler(s)
	took, cpu := time.Since(start), cpuTotal()-cpu0
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
	return encryptRun{rate: float64(o.n) / took.Seconds(), cpuPer1k: cpu.Seconds() / (float64(o.n) / 1000), insert: insert}, nil
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
