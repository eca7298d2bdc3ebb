package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// noisyKind is the noisy-neighbour scenario's partitioned kind, and
// noisyDoneKind its batches' completion.
const (
	noisyKind     = "bench.noisy"
	noisyDoneKind = "bench.noisy.done"
)

// noisyOptions are the noisy scenario's flags.
type noisyOptions struct {
	noisyStores  string // "pg,sqlite"
	noisyParts   string // partitions per configuration, comma-separated
	noisyBad     string // bad partitions per configuration, paired with noisyParts
	noisyHosts   int
	noisyWorkers int
	noisyLimit   int
	noisyRate    int
	noisyBatch   int
	noisyFor     time.Duration
	noisyWarmup  time.Duration
	noisyHang    time.Duration
	noisyWork    time.Duration
}

func (o *noisyOptions) registerNoisy(fs *flag.FlagSet) {
	fs.StringVar(&o.noisyStores, "noisy-stores", "pg,sqlite", "noisy: stores to run on (pg: -hosts Schedulers with a pool each; sqlite: one Scheduler on a file), comma-separated")
	fs.StringVar(&o.noisyParts, "noisy-partitions", "3,1000", "noisy: partitions of the kind per configuration, comma-separated")
	fs.StringVar(&o.noisyBad, "noisy-bad", "1,100", "noisy: of those, partitions whose jobs hang, paired with -noisy-partitions")
	fs.IntVar(&o.noisyHosts, "noisy-hosts", 2, "noisy: Schedulers sharing the PostgreSQL database, each with its own pool and store")
	fs.IntVar(&o.noisyWorkers, "noisy-workers", 300, "noisy: Config.Workers of each Scheduler")
	fs.IntVar(&o.noisyLimit, "noisy-limit", 5, "noisy: PartitionLimit.Concurrency, each partition's running jobs across the hosts")
	fs.IntVar(&o.noisyRate, "noisy-rate", 100, "noisy: jobs arriving per second, spread round-robin over the partitions")
	fs.IntVar(&o.noisyBatch, "noisy-batch", 10, "noisy: half the jobs arrive one by one (Schedule), half in batches of this size (ScheduleBatch)")
	fs.DurationVar(&o.noisyFor, "noisy-for", time.Minute, "noisy: how long jobs arrive in each run")
	fs.DurationVar(&o.noisyWarmup, "noisy-warmup", 5*time.Second, "noisy: start of each run left out of the figures")
	fs.DurationVar(&o.noisyHang, "noisy-hang", 10*time.Second, "noisy: how long a bad partition's job takes")
	fs.DurationVar(&o.noisyWork, "noisy-work", 10*time.Millisecond, "noisy: how long a healthy partition's job takes")
}

// noisyConfig is one configuration of the scenario.
type noisyConfig struct {
	store      string
	partitions int
	bad        int
}

// noisyConfigs pairs -noisy-partitions with -noisy-bad for each store.
func (o *options) noisyConfigs() ([]noisyConfig, error) {
	parts, err := intList("noisy-partitions", o.noisyParts)
	if err != nil {
		return nil, err
	}
	bad, err := intList("noisy-bad", o.noisyBad)
	if err != nil {
		return nil, err
	}
	if len(parts) != len(bad) {
		return nil, fmt.Errorf("-noisy-partitions and -noisy-bad: %d values against %d", len(parts), len(bad))
	}
	var out []noisyConfig
	for _, st := range strings.Split(o.noisyStores, ",") {
		st = strings.TrimSpace(st)
		if st != "pg" && st != "sqlite" {
			return nil, fmt.Errorf("-noisy-stores: unknown store %q (pg, sqlite)", st)
		}
		for i := range parts {
			if bad[i] < 0 || bad[i] >= parts[i] {
				return nil, fmt.Errorf("-noisy-bad %d: want 0 to %d for %d partitions", bad[i], parts[i]-1, parts[i])
			}
			out = append(out, noisyConfig{store: st, partitions: parts[i], bad: bad[i]})
		}
	}
	return out, nil
}

// runNoisy measures whether one partition's trouble reaches the others
// (issue 40, "one bad tenant must not slow the others"). One kind is
// partitioned by the metadata key "p" with PartitionLimit{Concurrency:
// -noisy-limit}; jobs arrive at -noisy-rate, round-robin over the
// partitions, half one by one and half as batch children. The first
// -noisy-bad partitions' jobs hang for -noisy-hang, the others' take
// -noisy-work. Each configuration runs twice, with the bad partitions
// hanging and with them healthy, and reports the healthy partitions'
// start lag (the handler's start minus the moment the Schedule or
// ScheduleBatch call began, host clock) in both. Target: the bad
// partitions add at most 50 ms to the healthy partitions' p99.
//
// On PostgreSQL -noisy-hosts Schedulers share the database, each with a
// pool and a store of its own, as separate hosts would; on SQLite one
// Scheduler runs on a file (the store is for one process).
func runNoisy(ctx context.Context, b *bench) (*result, error) {
	o := b.opt
	cfgs, err := o.noisyConfigs()
	if err != nil {
		return nil, err
	}
	r := newResult(map[string]any{"hosts (pg)": o.noisyHosts, "workers/host": o.noisyWorkers, "partition limit": o.noisyLimit,
		"rate": o.noisyRate, "batch": o.noisyBatch, "for": o.noisyFor.String(), "hang": o.noisyHang.String(), "work": o.noisyWork.String()})
	tbl := table{Title: "healthy partitions' start lag (ms, host clock, from the Schedule call)",
		Columns: []string{"store", "partitions", "bad", "bad hang", "healthy jobs", "p50", "p99", "max", "bad jobs started"}}
	for _, c := range cfgs {
		var p99 [2]time.Duration
		for i, hang := range []bool{false, true} {
			b.progressf("noisy: %s, %d partitions, %d bad, hanging=%v", c.store, c.partitions, c.bad, hang)
			lags, badStarts, err := noisyRun(ctx, b, c, hang)
			if err != nil {
				return nil, fmt.Errorf("noisy %s %d/%d: %w", c.store, c.bad, c.partitions, err)
			}
			if len(lags) == 0 {
				return nil, fmt.Errorf("noisy %s %d/%d: no healthy job started", c.store, c.bad, c.partitions)
			}
			p99[i] = lags.pct(99)
			tbl.Rows = append(tbl.Rows, append([]string{c.store, fmt.Sprint(c.partitions), fmt.Sprint(c.bad), fmt.Sprint(hang),
				fmt.Sprint(len(lags)), fmt.Sprintf("%.1f", ms(lags.pct(50))), fmt.Sprintf("%.1f", ms(p99[i])),
				fmt.Sprintf("%.1f", ms(lags.max()))}, fmt.Sprint(badStarts)))
		}
		r.atMost(fmt.Sprintf("%s, %d partitions, %d bad: healthy p99 added by the bad", c.store, c.partitions, c.bad),
			ms(p99[1]-p99[0]), "ms", 50)
	}
	r.Tables = append(r.Tables, tbl)
	return r, nil
}

// noisyPayload is a noisy job's payload: when its Schedule call began.
type noisyPayload struct {
	SentNS int64 `json:"sent_ns"`
}

// noisyRun runs one configuration once and returns the healthy
// partitions' start lags after the warm-up and how many bad jobs started.
func noisyRun(ctx context.Context, b *bench, c noisyConfig, hang bool) (durations, int, error) {
	o := b.opt
	stores, cleanup, err := noisyStores(ctx, b, c.store)
	if err != nil {
		return nil, 0, err
	}
	defer cleanup()
	var (
		mu        sync.Mutex
		lags      durations
		badStarts int
		measureAt time.Time // host time from which lags count
	)
	handler := ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
		now := time.Now()
		var p noisyPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return ax.Permanent(fmt.Errorf("payload %q: %w", j.Payload, err))
		}
		bad := j.Metadata["bad"] == "1"
		sent := time.Unix(0, p.SentNS)
		mu.Lock()
		if bad {
			badStarts++
		} else if sent.After(measureAt) {
			lags = append(lags, now.Sub(sent))
		}
		mu.Unlock()
		d := o.noisyWork
		if bad {
			d = o.noisyHang
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	})
	limit := ax.PartitionBy(ax.PartitionByMetadata("p"), ax.PartitionLimit{Concurrency: o.noisyLimit})
	var scheds []*ax.Scheduler
	defer func() {
		for _, s := range scheds {
			stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.Stop(stopCtx) // hanging jobs are cancelled and handed back
			cancel()
		}
	}()
	for _, st := range stores {
		s, err := ax.New(ax.Config{Store: st, Workers: o.noisyWorkers})
		if err != nil {
			return nil, 0, err
		}
		scheds = append(scheds, s)
		if err := s.Handle(noisyKind, handler, limit); err != nil {
			return nil, 0, err
		}
		if err := s.Handle(noisyDoneKind, ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })); err != nil {
			return nil, 0, err
		}
		if err := s.Start(ctx); err != nil {
			return nil, 0, err
		}
	}
	start := time.Now()
	mu.Lock()
	measureAt = start.Add(o.noisyWarmup)
	mu.Unlock()
	if err := noisyProduce(ctx, scheds, c, hang, o); err != nil {
		return nil, 0, err
	}
	// Let the last healthy jobs start: they are due at once.
	drain := time.NewTimer(2 * time.Second)
	select {
	case <-drain.C:
	case <-ctx.Done():
		drain.Stop()
		return nil, 0, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return append(durations(nil), lags...), badStarts, nil
}

// noisyProduce schedules jobs at -noisy-rate for -noisy-for, round-robin
// over the partitions and the Schedulers, alternating runs of -noisy-batch
// single Schedule calls with one ScheduleBatch of as many children.
func noisyProduce(ctx context.Context, scheds []*ax.Scheduler, c noisyConfig, hang bool, o options) error {
	tick := time.NewTicker(time.Second / time.Duration(max(o.noisyRate, 1)))
	defer tick.Stop()
	end := time.Now().Add(o.noisyFor)
	batch := max(o.noisyBatch, 1)
	var pending []ax.Request
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		part := i % c.partitions
		md := map[string]string{"p": "p" + strconv.Itoa(part), "bad": "0"}
		if hang && part < c.bad {
			md["bad"] = "1"
		}
		s := scheds[i%len(scheds)]
		if (i/batch)%2 == 0 {
			p, _ := json.Marshal(noisyPayload{SentNS: time.Now().UnixNano()})
			if _, err := s.Schedule(ctx, noisyKind, json.RawMessage(p), ax.Metadata(md)); err != nil {
				return fmt.Errorf("schedule: %w", err)
			}
			continue
		}
		pending = append(pending, ax.Request{Kind: noisyKind, Options: []ax.ScheduleOption{ax.Metadata(md)}})
		if len(pending) < batch {
			continue
		}
		p, _ := json.Marshal(noisyPayload{SentNS: time.Now().UnixNano()})
		for k := range pending {
			pending[k].Payload = json.RawMessage(p)
		}
		if _, err := s.ScheduleBatch(ctx, ax.Batch{Children: pending, Completion: ax.Request{Kind: noisyDoneKind}}); err != nil {
			return fmt.Errorf("schedule batch: %w", err)
		}
		pending = pending[:0]
	}
	return nil
}

// noisyStores opens the stores of one run: -noisy-hosts pgstores on a
// fresh database, each with its own pool, or one sqlitestore on a fresh
// file. cleanup closes them and drops what they used.
func noisyStores(ctx context.Context, b *bench, kind string) ([]store.Store, func(), error) {
	if kind == "sqlite" {
		dir, err := os.MkdirTemp("", "axbench-noisy-")
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlitestore.Open(ctx, filepath.Join(dir, "ax.db"))
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, nil, err
		}
		return []store.Store{st}, func() { _ = st.Close(); _ = os.RemoveAll(dir) }, nil
	}
	d, err := b.createDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	var sessions []*session
	cleanup := func() {
		for _, s := range sessions {
			s.close()
		}
		d.close()
	}
	stores := make([]store.Store, 0, b.opt.noisyHosts)
	for h := range max(b.opt.noisyHosts, 1) {
		s, err := d.openSession(ctx, b.opt.conns, fmt.Sprintf("axbench-noisy-%d", h))
		if err != nil {
			cleanup()
			return nil, nil, errors.Join(fmt.Errorf("host %d", h), err)
		}
		sessions = append(sessions, s)
		stores = append(stores, s.store)
	}
	return stores, cleanup, nil
}
