package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverClock reads the CPU time a PostgreSQL server on this machine has
// spent: its postmaster's own and its reaped children's (cutime, cstime),
// plus every live child's (backends, autovacuum, the WAL writer and
// checkpointer). Taken before and after a run, the difference is the
// server's cost of the run, whoever's backend did the work: on a shared
// server it includes whatever other clients did meanwhile.
type serverClock struct{ postmaster int }

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// newServerClock finds the postmaster of d's server through a backend's
// parent process. It fails when the server is not on this machine (or its
// processes cannot be read).
func newServerClock(ctx context.Context, d *benchDB) (*serverClock, error) {
	return newServerClockOf(ctx, d.pool)
}

// newServerClockOf is newServerClock for the server pool connects to.
func newServerClockOf(ctx context.Context, pool *pgxpool.Pool) (*serverClock, error) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, err
	}
	f, err := procStat(backend)
	if err != nil {
		return nil, fmt.Errorf("server CPU: backend %d: %w", backend, err)
	}
	c := &serverClock{postmaster: f.ppid}
	if _, err := c.total(); err != nil {
		return nil, err
	}
	return c, nil
}

// total returns the server's CPU time so far.
func (c *serverClock) total() (time.Duration, error) {
	pm, err := procStat(c.postmaster)
	if err != nil {
		return 0, fmt.Errorf("server CPU: postmaster %d: %w", c.postmaster, err)
	}
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		f, err := procStat(pid)
		if err != nil || f.ppid != c.postmaster {
			continue // gone meanwhile (reaped: now in cutime), or not ours
		}
		ticks += f.utime + f.stime
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// statFields are the fields of /proc/PID/stat serverClock reads.
type statFields struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/pid/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func procStat(pid int) (statFields, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return statFields{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return statFields{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// After ')': state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return statFields{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(k int) int64 { n, _ := strconv.ParseInt(f[k-3], 10, 64); return n }
	return statFields{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// serverCPU returns c's total, or 0 when the server's CPU is not measured
// (c nil) or could not be read.
func serverCPU(c *serverClock) time.Duration {
	if c == nil {
		return 0
	}
	d, _ := c.total()
	return d
}
