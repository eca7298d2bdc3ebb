package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// machine describes where the figures were taken.
type machine struct {
	CPUs       int        `json:"nproc"`
	GOMAXPROCS int        `json:"gomaxprocs"`
	CPUModel   string     `json:"cpu_model"`
	Postgres   string     `json:"postgres"`
	Go         string     `json:"go"`
	Server     serverInfo `json:"server"`
}

// describeMachine describes this machine and the server at dsn; kind says
// whether that is the shared server (-db) or the private cluster.
func describeMachine(ctx context.Context, dsn, kind string) (machine, error) {
	m := machine{CPUs: goruntime.NumCPU(), GOMAXPROCS: goruntime.GOMAXPROCS(0), CPUModel: cpuModel(), Go: goruntime.Version()}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return m, fmt.Errorf("connect to %s: %w (set -db or TEST_DATABASE_URL)", redact(dsn), err)
	}
	defer conn.Close(context.Background())
	if m.Server, err = describeServer(cctx, conn, kind, dsn); err != nil {
		return m, fmt.Errorf("describe the server: %w", err)
	}
	m.Postgres = m.Server.Version
	return m, nil
}

func (m machine) print(w io.Writer) {
	ram := ""
	if b := memTotal(); b > 0 {
		ram = fmt.Sprintf(", %.1f GiB RAM", float64(b)/(1<<30))
	}
	fmt.Fprintf(w, "axbench: %d CPUs (GOMAXPROCS %d), %s%s; PostgreSQL %s; %s; load %s at start\n",
		m.CPUs, m.GOMAXPROCS, m.CPUModel, ram, m.Postgres, m.Go, loadAvg())
	m.Server.print(w)
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg returns the three load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuTime returns this process's user and system CPU time.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuTotal is user + system CPU time of this process.
func cpuTotal() time.Duration {
	u, s := cpuTime()
	return u + s
}

// memStatus returns VmRSS and VmHWM of this process, in kB.
func memStatus() (rss, hwm int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}
