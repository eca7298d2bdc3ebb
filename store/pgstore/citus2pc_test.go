package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/citustest"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/pgstore"
)

// TestCitusTwoPhaseCommitRecovers crashes the coordinator between the two
// phases of a ScheduleTx's commit and checks that Citus's recovery leaves
// the caller's write and the job together: both, when the coordinator had
// committed (it crashed before telling the worker), neither when it had
// not (it crashed after the worker prepared). The caller writes a plain
// table of the coordinator, the case Citus would commit in one phase
// (worker first) were it not for InsertTx's citus_2pc.
//
// The crash is exact, not timed: gdb stops the coordinator's backend at a
// function of Citus's commit (CheckRemoteTransactionsHealth runs right
// after the workers prepared; CoordinatedRemoteTransactionsCommit, after
// the local commit, sends COMMIT PREPARED) and kills it there, which makes
// PostgreSQL restart the coordinator. It needs gdb, a coordinator on this
// machine and the right to trace it (root, as in CI); it holds the Citus
// tests' lock exclusively.
func TestCitusTwoPhaseCommitRecovers(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed: it stops the coordinator between the two phases")
	}
	if os.Geteuid() != 0 {
		t.Skip("tracing the coordinator's backend needs root")
	}
	u, err := url.Parse(citustest.URL())
	if err == nil && u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" {
		t.Skip("the coordinator is not on this machine")
	}
	citustest.Exclusive(t)
	pool, schema := citusSchema(t)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id uuid PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// Citus's maintenance daemon recovers in-doubt transactions by itself
	// (citus.recover_2pc_interval): off while the test looks at them.
	setRecovery := func(interval string) {
		if _, err := pool.Exec(ctx, `ALTER SYSTEM SET citus.recover_2pc_interval = `+interval); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			t.Fatal(err)
		}
	}
	setRecovery("-1")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `ALTER SYSTEM RESET citus.recover_2pc_interval`); err == nil {
			_, _ = pool.Exec(context.Background(), `SELECT pg_reload_conf()`)
		}
	})
	for _, c := range []struct {
		name      string
		breakAt   string
		committed bool
	}{
		{"AfterLocalCommit", "CoordinatedRemoteTransactionsCommit", true},
		{"BeforeLocalCommit", "CheckRemoteTransactionsHealth", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := pgstore.NewCitus(ctx, pool, pgstore.WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			order, job := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			crashBetweenPhases(t, c.breakAt, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.orders VALUES ($1)`, [16]byte(order)); err != nil {
					return err
				}
				_, err := st.InsertTx(ctx, tx, []store.InsertParams{{ID: job, Kind: "ship", Payload: []byte(`{}`),
					Priority: store.PriorityNormal, MaxAttempts: 3, Delay: time.Hour}})
				return err
			})
			start := time.Now()
			waitCoordinator(t, pool)
			t.Logf("the coordinator answered again after %s", time.Since(start).Round(time.Millisecond))
			if n := preparedOnWorkers(t); n == 0 {
				t.Fatalf("no prepared transaction on the workers after the crash: the commit did not go through Citus's two-phase commit (or the crash missed its window)")
			}
			if _, err := pool.Exec(ctx, `SELECT recover_prepared_transactions()`); err != nil {
				t.Fatal(err)
			}
			if n := preparedOnWorkers(t); n != 0 {
				t.Fatalf("%d prepared transactions left on the workers after recovery", n)
			}
			var orders, jobs int
			err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.orders WHERE id = $1),
				(SELECT count(*) FROM `+schema+`.jobs WHERE id = $2)`, [16]byte(order), [16]byte(job)).Scan(&orders, &jobs)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if c.committed {
				want = 1
			}
			if orders != want || jobs != want {
				t.Fatalf("after recovery: %d orders and %d jobs, want %d of each", orders, jobs, want)
			}
		})
	}
}

// crashBetweenPhases runs write in a transaction on a connection of its
// own to the coordinator and commits it with gdb attached to the
// connection's backend, which kills the backend when it reaches the
// function breakAt.
func crashBetweenPhases(t *testing.T, breakAt string, write func(pgx.Tx) error) {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, citustest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(tx); err != nil {
		t.Fatal(err)
	}
	gdb := exec.CommandContext(ctx, "gdb", "-p", fmt.Sprint(conn.PgConn().PID()), "-batch", "-nx",
		"-ex", "set pagination off", "-ex", "break "+breakAt, "-ex", "continue", "-ex", "kill")
	out, err := gdb.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	gdb.Stderr = gdb.Stdout
	if err := gdb.Start(); err != nil {
		t.Fatal(err)
	}
	// Commit only once gdb set its breakpoint and let the backend go on
	// (it is no longer in a tracing stop).
	lines := bufio.NewScanner(out)
	var (
		mu   sync.Mutex
		seen []string
		set  = make(chan struct{})
	)
	go func() {
		for lines.Scan() {
			mu.Lock()
			seen = append(seen, lines.Text())
			mu.Unlock()
			if strings.HasPrefix(lines.Text(), "Breakpoint 1 at") {
				close(set)
			}
		}
	}()
	said := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(seen, "\n")
	}
	select {
	case <-set:
	case <-time.After(30 * time.Second):
		t.Fatalf("gdb set no breakpoint; it said:\n%s", said())
	}
	pid := conn.PgConn().PID()
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "(tracing stop)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend stays stopped; gdb said:\n%s", said())
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = tx.Commit(ctx)
	if err == nil {
		t.Fatalf("the commit returned without the crash; gdb said:\n%s", said())
	}
	t.Logf("the commit failed as the backend died: %v", err)
	if err := gdb.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatal(err)
		}
	}
}

// waitCoordinator waits until the coordinator answers again after its
// restart.
func waitCoordinator(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := pool.Ping(ctxT(t))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator did not come back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// preparedOnWorkers counts Citus's prepared transactions on the workers.
func preparedOnWorkers(t *testing.T) int {
	t.Helper()
	n := 0
	for _, w := range citustest.WorkerURLs(t) {
		conn, err := pgx.Connect(ctxT(t), w)
		if err != nil {
			t.Fatal(err)
		}
		var k int
		err = conn.QueryRow(ctxT(t), `SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'citus\_%'`).Scan(&k)
		conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}
