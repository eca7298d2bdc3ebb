package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// CPU waits: on a loaded machine a round trip's tail is mostly time that
// the client's goroutine or the server's backend spent runnable without a
// CPU. Linux counts it per thread (/proc/PID/task/TID/schedstat: CPU
// time, run-queue wait, timeslices); the Go runtime counts how long
// goroutines waited to run (runtime/metrics /sched/latencies:seconds).

// schedStat is the sum of /proc schedstat counters over threads.
type schedStat struct {
	waitNS, slices int64
}

// readSchedStat sums the schedstat of every thread of process pid (0:
// this process). It returns false where /proc has no schedstat (not
// Linux, or the kernel lacks schedstats).
func readSchedStat(pid int) (schedStat, bool) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	tasks, err := filepath.Glob(filepath.Join(dir, "*", "schedstat"))
	if err != nil || len(tasks) == 0 {
		return schedStat{}, false
	}
	var s schedStat
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			return schedStat{}, false
		}
		w, err1 := strconv.ParseInt(f[1], 10, 64)
		n, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return schedStat{}, false
		}
		s.waitNS += w
		s.slices += n
	}
	return s, true
}

// perSlice is the mean run-queue wait per timeslice between s0 and s.
func (s schedStat) perSlice(s0 schedStat) time.Duration {
	if s.slices <= s0.slices {
		return 0
	}
	return time.Duration((s.waitNS - s0.waitNS) / (s.slices - s0.slices))
}

// cpuWaits measures a run's CPU waits: this process's threads and
// goroutines, and the server's backends when the server runs on this
// machine (the private cluster).
type cpuWaits struct {
	self   schedStat
	selfOK bool
	sched  *metrics.Float64Histogram
}

const schedLatencies = "/sched/latencies:seconds"

func startCPUWaits() *cpuWaits {
	w := &cpuWaits{}
	w.self, w.selfOK = readSchedStat(0)
	w.sched = readSchedLatencies()
	return w
}

func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// end adds the figures since startCPUWaits to r; backends are the pids
// of the server's backends that served the run (cumulative since they
// started, which was at the run's start), nil when the server is not
// local.
func (w *cpuWaits) end(r *result, backends []int) {
	if s, ok := readSchedStat(0); ok && w.selfOK {
		r.add("CPU wait of axbench's threads, mean per timeslice", ms(s.perSlice(w.self)), "ms")
	}
	if h := readSchedLatencies(); h != nil && w.sched != nil {
		r.add("goroutine scheduling latency p99", ms(histPct(h, w.sched, 99)), "ms")
	}
	var sum schedStat
	for _, pid := range backends {
		if s, ok := readSchedStat(pid); ok {
			sum.waitNS += s.waitNS
			sum.slices += s.slices
		}
	}
	if sum.slices > 0 {
		r.add("CPU wait of the scheduler's PostgreSQL backends, mean per timeslice", ms(sum.perSlice(schedStat{})), "ms")
	}
}

// histPct is percentile p (nearest rank) of the counts h has beyond h0
// (the same buckets), as the upper bound of the bucket it falls in.
func histPct(h, h0 *metrics.Float64Histogram, p float64) time.Duration {
	var total uint64
	for i := range h.Counts {
		total += h.Counts[i] - h0.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := max(uint64(math.Ceil(p/100*float64(total))), 1) // nearest rank, as durations.pct
	var seen uint64
	for i := range h.Counts {
		seen += h.Counts[i] - h0.Counts[i]
		if seen >= want {
			if math.IsInf(h.Buckets[i+1], 1) {
				return time.Duration(h.Buckets[i] * float64(time.Second)) // the last bucket has no upper bound
			}
			return time.Duration(h.Buckets[i+1] * float64(time.Second))
		}
	}
	return 0
}

// backendPIDs returns the pids of the connections named app on the
// database, if the server runs on this machine (its pids are ours to
// read: the private cluster).
func (d *benchDB) backendPIDs(ctx context.Context, app string, local bool) []int {
	if !local {
		return nil
	}
	rows, err := d.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, app)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
