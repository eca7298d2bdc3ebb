package faulttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/internal/raceflag"
	"github.com/axsched/ax/store/pgstore"
)

// soak reports whether the long variants run (AX_SOAK=1).
func soak() bool { return os.Getenv("AX_SOAK") == "1" }

// fastFailover are worker flags for scenarios that wait for lease expiry:
// a 2s lease (heartbeat every 667ms), a 2s leader TTL (tries every 667ms)
// and a 500ms rescue interval, so failover takes ~3s instead of ~13s. The
// defaults are measured in soak mode.
var fastFailover = []string{"-lease", "2s", "-leader-ttl", "2s", "-rescue", "500ms"}

// cluster is one scenario's database and worker processes.
type cluster struct {
	t     *testing.T
	dsn   string
	pool  *pgxpool.Pool
	ax    *ax.Scheduler // never started: schedules jobs only
	dir   string        // worker logs; removed after cleanup prints them
	procs []*proc
	args  []string // every worker's flags first (the Citus cluster's -citus)
	// mirror, when set, copies the jobs and nodes into pool's ax schema
	// before every check (the Citus cluster's: its checks join the
	// ledger to the jobs, which Citus cannot across a local table).
	mirror func()
}

// synced runs the cluster's mirror, if any, and returns its pool.
func (c *cluster) synced() *pgxpool.Pool {
	if c.mirror != nil {
		c.mirror()
	}
	return c.pool
}

// newCluster is newLedgerCluster for a scenario whose system under test
// is worker processes: those are built without -race (worker), so in a
// test binary built with -race it skips; CI runs the package without
// -race as well (go test ./...).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	skipUnderRace(t)
	return newLedgerCluster(t)
}

// sideBySide lets a scenario run beside another (t.Parallel; go test
// runs two at a time by default, -parallel being GOMAXPROCS), after the
// scenarios that do not call it have run one at a time. The scenarios
// mostly wait on the wall clock, each on a database of its own: run so,
// the package took 142 s instead of 191 s, with the machine's two cores
// busy 40 % of the time (PostgreSQL's processes included). Those that
// call it bound no start time tighter than a lease; those whose checks
// bound start lags, rates or recovery times to a second or so (Kill,
// Graceful, ClockSkew, Periodic, the flow scenarios) still run alone.
func sideBySide(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// skipUnderRace skips a scenario of worker processes in a test binary
// built with -race: see newCluster.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceflag.Enabled {
		t.Skip("fault scenarios run without -race (go test ./internal/faulttest); their worker processes are built without it anyway")
	}
}

// newLedgerCluster returns a fresh database with the AX schema and an
// executions table, and a client Scheduler to schedule jobs.
func newLedgerCluster(t *testing.T) *cluster {
	t.Helper()
	dsn := pgtest.DSN(t)
	pool := pgtest.PoolFor(t, dsn)
	ctx := context.Background()
	createLedger(t, pool)
	st, err := pgstore.New(ctx, pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	client, err := ax.New(ax.Config{Store: st})
	require.NoError(t, err)
	c := &cluster{t: t, dsn: dsn, pool: pool, ax: client, dir: t.TempDir()}
	t.Cleanup(c.cleanup)
	return c
}

// ledgerSQL creates the executions table the workers record every
// execution in, and the downstream table -downstream reads.
const ledgerSQL = `CREATE TABLE executions (
	job_id          uuid        NOT NULL,
	node            text        NOT NULL,
	attempt         integer     NOT NULL,
	run_at          timestamptz NOT NULL,
	started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	host_started_at timestamptz,
	claimed_at      timestamptz,
	finished_at     timestamptz,
	host_finished_at timestamptz,
	outcome         text,
	fence           bigint,
	PRIMARY KEY (job_id, attempt, node)
);
CREATE TABLE downstream (up boolean NOT NULL);
INSERT INTO downstream VALUES (true)`

// createLedger creates ledgerSQL's tables in pool's database.
func createLedger(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), ledgerSQL)
	require.NoError(t, err)
}

// proc is one worker process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr string // path of its log file
	done   chan struct{}

	mu    sync.Mutex
	lines []string
	added chan struct{} // signalled on every new line
}

// start starts a worker named name connecting to dsn (the cluster's by
// default; pass a proxy's) and waits until it is READY.
func (c *cluster) start(name, dsn string, args ...string) *proc {
	c.t.Helper()
	if dsn == "" {
		dsn = c.dsn
	}
	p := &proc{name: name, done: make(chan struct{}), added: make(chan struct{}, 1)}
	p.stderr = filepath.Join(c.dir, name+".log")
	errf, err := os.Create(p.stderr)
	require.NoError(c.t, err)
	p.cmd = exec.Command(worker(c.t), append(append([]string{"-dsn", dsn, "-node", name}, c.args...), args...)...)
	p.cmd.Stderr = errf
	out, err := p.cmd.StdoutPipe()
	require.NoError(c.t, err)
	require.NoError(c.t, p.cmd.Start())
	errf.Close()
	c.procs = append(c.procs, p)
	go p.read(out)
	p.waitLine(c.t, "READY", 30*time.Second)
	return p
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
		select {
		case p.added <- struct{}{}:
		default:
		}
	}
	_ = p.cmd.Wait()
	close(p.done)
}

// has returns the lines starting with prefix.
func (p *proc) has(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// waitLine waits until the worker printed a line starting with prefix.
func (p *proc) waitLine(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if l := p.has(prefix); len(l) > 0 {
			return l[0]
		}
		select {
		case <-p.added:
		case <-p.done:
			if l := p.has(prefix); len(l) > 0 {
				return l[0]
			}
			t.Fatalf("worker %s exited before printing %q\n%s", p.name, prefix, p.logTail())
		case <-deadline.C:
			t.Fatalf("worker %s did not print %q within %s\n%s", p.name, prefix, timeout, p.logTail())
		}
	}
}

// leader reports whether the worker last announced it leads.
func (p *proc) leader() bool {
	l := p.has("EVENT leader ")
	return len(l) > 0 && l[len(l)-1] == "EVENT leader true"
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(s))
}

// wait waits for the process to exit.
func (p *proc) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("worker %s did not exit within %s", p.name, timeout)
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.stderr)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "--- " + p.name + " log tail ---\n" + strings.Join(lines, "\n")
}

// cleanup kills every worker still running (continuing paused ones) and
// waits for them; on failure it prints their log tails.
func (c *cluster) cleanup() {
	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if c.t.Failed() {
			c.t.Log(p.logTail())
		}
	}
}

// job describes a "work" job to schedule.
type job struct {
	delay    time.Duration
	priority ax.PriorityLevel
	ms       int
}

// schedule stores jobs and returns their IDs.
func (c *cluster) schedule(jobs []job) []uuid.UUID {
	c.t.Helper()
	reqs := make([]ax.Request, len(jobs))
	for i, j := range jobs {
		prio := j.priority
		if prio == 0 {
			prio = ax.Normal
		}
		reqs[i] = ax.Request{Kind: "work", Payload: map[string]int{"ms": j.ms},
			Options: []ax.ScheduleOption{ax.In(j.delay), ax.Priority(prio)}}
	}
	ids := make([]uuid.UUID, 0, len(jobs))
	for chunk := range slices.Chunk(reqs, 5000) {
		res, err := c.ax.ScheduleMany(context.Background(), chunk)
		require.NoError(c.t, err)
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// dbNow reads the database clock.
func (c *cluster) dbNow() time.Time {
	c.t.Helper()
	var now time.Time
	require.NoError(c.t, c.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// count runs a count query.
func (c *cluster) count(sql string, args ...any) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.synced().QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waitFor polls cond every 50ms until it holds.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.logHosts()
			c.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logHosts logs what each node ran and holds, and the work jobs' states:
// when a wait times out, it tells a starved or stuck host from a slow
// cluster.
func (c *cluster) logHosts() {
	c.t.Helper()
	ctx := context.Background()
	rows, err := c.pool.Query(ctx, `SELECT node, count(*), count(*) FILTER (WHERE outcome IS NULL) FROM executions GROUP BY node ORDER BY node`)
	if err == nil {
		for rows.Next() {
			var node string
			var ran, open int
			if rows.Scan(&node, &ran, &open) == nil {
				c.t.Logf("node %s: %d executions recorded, %d without an outcome", node, ran, open)
			}
		}
		rows.Close()
	}
	rows, err = c.synced().Query(ctx, `SELECT state, count(*), coalesce(min(run_at)::text, '') FROM ax.jobs_all WHERE kind = 'work' GROUP BY state ORDER BY state`)
	if err == nil {
		for rows.Next() {
			var state, oldest string
			var n int
			if rows.Scan(&state, &n, &oldest) == nil {
				c.t.Logf("work jobs %s: %d (earliest run_at %s)", state, n, oldest)
			}
		}
		rows.Close()
	}
	c.t.Logf("database clock %s", c.dbNow())
}

// waitAllSucceeded waits until every work job succeeded.
func (c *cluster) waitAllSucceeded(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.waitFor("every job to succeed", timeout, func() bool {
		return c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'work' AND state <> 'succeeded'`) == 0
	})
	return time.Since(start)
}

// tally is what the executions table says about a scenario.
type tally struct {
	jobs, executions, lost, duplicated int
}

// tally counts jobs, executions, jobs never executed and jobs executed
// more than once.
func (c *cluster) tally() tally {
	c.t.Helper()
	var t tally
	require.NoError(c.t, c.synced().QueryRow(context.Background(), `SELECT
	(SELECT count(*) FROM ax.jobs_all WHERE kind = 'work'),
	(SELECT count(*) FROM executions),
	(SELECT count(*) FROM ax.jobs_all j WHERE kind = 'work' AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.job_id = j.id)),
	(SELECT count(*) FROM (SELECT job_id FROM executions GROUP BY job_id HAVING count(*) > 1) d)`).
		Scan(&t.jobs, &t.executions, &t.lost, &t.duplicated))
	return t
}

// lagStats returns start-lag percentiles (started_at - run_at, database
// clock) over the executions matching where.
func (c *cluster) lagStats(where string, args ...any) (p50, p99, max time.Duration, early int) {
	c.t.Helper()
	var a, b, m float64
	require.NoError(c.t, c.pool.QueryRow(context.Background(), `SELECT
	coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)), 0),
	coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)), 0),
	coalesce(max(extract(epoch FROM started_at - run_at)), 0),
	count(*) FILTER (WHERE started_at < run_at)
FROM executions WHERE `+where, args...).Scan(&a, &b, &m, &early))
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)).Round(time.Millisecond) }
	return sec(a), sec(b), sec(m), early
}

// mixed returns n jobs with delays spread over spread, priorities cycling
// and ms of work each.
func mixed(n int, spread time.Duration, ms int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = job{
			delay:    time.Duration(i) * spread / time.Duration(n),
			priority: ax.PriorityLevel(1 + i%3),
			ms:       ms,
		}
	}
	return jobs
}

// proxy is a TCP proxy to the PostgreSQL server that can cut every
// connection through it and refuse new ones for a while.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	until time.Time // refuse connections until then
	wg    sync.WaitGroup
}

// newProxy listens on a free local port and returns a DSN like dsn that
// goes through it. It stops when the test ends.
func newProxy(t *testing.T, dsn string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: u.Host, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := time.Now().Before(p.until)
		if !refuse {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.drop(c)
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(up, c); up.Close(); c.Close() })
	_, _ = io.Copy(c, up)
	up.Close()
	c.Close()
	wg.Wait()
}

func (p *proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cut closes every connection through the proxy and refuses new ones for
// d.
func (p *proxy) cut(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// figure prints a scenario's figure (with -v) in one greppable format.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), fmt.Sprintf(format, args...))
}
