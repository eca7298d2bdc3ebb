package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/axsched/ax/internal/pgtest"
)

// bouncerServerConns is the number of server connections PgBouncer keeps
// per database: fewer than the pools in front of it open, so that
// consecutive transactions of one client connection land on different
// server connections (what breaks session state and prepared statements).
const bouncerServerConns = 6

// bouncer is a PgBouncer process in transaction mode, started by a test in
// front of the test server and stopped when the test ends.
type bouncer struct {
	host string
	port int

	mu  sync.Mutex
	log bytes.Buffer // its stderr, printed when the test fails
}

// pgbouncerBinary returns the path of Debian's pgbouncer, skipping the
// test when it is not installed, or failing it when AX_REQUIRE_PGBOUNCER=1
// (CI installs it).
func pgbouncerBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	msg := "pgbouncer is not installed (apt-get install pgbouncer); set AX_REQUIRE_PGBOUNCER=1 to fail instead of skipping"
	if os.Getenv("AX_REQUIRE_PGBOUNCER") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startBouncer starts PgBouncer with pool_mode = transaction in front of
// the server of serverURL (a URL, as pgtest.ServerURL returns), on a free
// port of 127.0.0.1, and returns it once it accepts connections. Every
// database name is forwarded to the server as is, logged in as the URL's
// user (auth_type = any: PgBouncer accepts any client and logs in to the
// server with the configured user, like the test server's trust auth).
func startBouncer(t *testing.T, serverURL string) *bouncer {
	t.Helper()
	bin := pgbouncerBinary(t)
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		t.Fatalf("deploytest: the server's URL must be a URL to put PgBouncer in front of it: %q", serverURL)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	db := fmt.Sprintf("host=%s port=%s user=%s", host, port, u.User.Username())
	if pw, ok := u.User.Password(); ok {
		db += " password=" + pw
	}
	b := &bouncer{host: "127.0.0.1"}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		b.port = freePort(t)
		conf := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
max_db_connections = %d
server_lifetime = 3600
ignore_startup_parameters = extra_float_digits
admin_users = %s
`, db, b.port, bouncerServerConns, bouncerServerConns, u.User.Username())
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{ini}
		if os.Geteuid() == 0 {
			// PgBouncer refuses to run as root; -u drops to another
			// user once it has read its configuration.
			args = []string{"-u", unprivilegedUser(t), ini}
		}
		cmd := exec.Command(bin, args...)
		cmd.Stderr = lockedWriter{&b.mu, &b.log}
		cmd.Stdout = cmd.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("deploytest: start pgbouncer: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		if b.waitReady(exited) {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGINT) // immediate shutdown
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("pgbouncer log:\n%s", b.logText())
				}
			})
			return b
		}
		_ = cmd.Process.Kill()
		<-exited
		if attempt == 3 {
			t.Fatalf("deploytest: pgbouncer did not start:\n%s", b.logText())
		}
	}
}

// waitReady waits until PgBouncer accepts connections, or exits.
func (b *bouncer) waitReady(exited <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(b.host, strconv.Itoa(b.port)), time.Second)
		if err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (b *bouncer) logText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// url returns direct, a URL of the test server, pointed at PgBouncer
// instead (same database, user and parameters).
func (b *bouncer) url(t *testing.T, direct string) string {
	t.Helper()
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort(b.host, strconv.Itoa(b.port))
	return u.String()
}

// poolOn returns a pool of up to maxConns connections on dsn, its queries
// sent in mode, its configuration passed to each of configure before it
// is made, closed when t ends.
func poolOn(t *testing.T, dsn string, mode pgx.QueryExecMode, maxConns int32, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = mode
	for _, c := range configure {
		c(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// unprivilegedUser names a user PgBouncer can switch to when the tests
// run as root.
func unprivilegedUser(t *testing.T) string {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name
		}
	}
	t.Skip("running as root and no unprivileged user (postgres, nobody) for pgbouncer -u")
	return ""
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// directURL returns a fresh migrated database of the test server (see
// pgtest.DSN) as a URL; the scenarios put PgBouncer in front of it.
func directURL(t *testing.T) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	if !strings.Contains(dsn, "://") {
		t.Skip("TEST_DATABASE_URL is not a URL: the PgBouncer scenarios need one")
	}
	return dsn
}

// withDatabase returns serverURL naming database db.
func withDatabase(t *testing.T, serverURL, db string) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// noLeaks fails t if goroutines that were not running when it was called
// still run once t and all its cleanups registered later are done (pools,
// stores, schedulers). The package has no TestMain of its own, so that the
// other scenarios' files can add one.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
