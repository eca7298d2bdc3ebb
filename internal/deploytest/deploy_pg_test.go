package deploytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBinDir returns the directory of PostgreSQL's server programs (initdb,
// pg_ctl, pg_basebackup): $AX_PG_BIN, else Debian's
// /usr/lib/postgresql/15/bin, else the bindir pg_config reports. A test
// that needs them skips when there are none, or fails under
// AX_REQUIRE_POSTGRES=1.
func pgBinDir(t *testing.T) string {
	t.Helper()
	dirs := []string{os.Getenv("AX_PG_BIN"), "/usr/lib/postgresql/15/bin"}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	missing(t, "no PostgreSQL server programs (initdb, pg_ctl): set AX_PG_BIN or install postgresql-15")
	return ""
}

// missing skips t, or fails it under AX_REQUIRE_POSTGRES=1 (CI).
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AX_REQUIRE_POSTGRES") == "1" {
		t.Fatalf("%s (AX_REQUIRE_POSTGRES=1)", why)
	}
	t.Skip(why)
}

// pgServer is a PostgreSQL cluster of the test's own: its data directory,
// port and log. Root may not run initdb or postgres, so as root every
// program runs as the postgres user, which owns the directory.
type pgServer struct {
	t    *testing.T
	bin  string
	dir  string // data directory
	port int
	log  string
	asPG bool // run programs through runuser -u postgres
}

// serverDir makes a directory the servers' user can own, removed when t
// ends (after the servers stop: cleanups run last-registered first).
func serverDir(t *testing.T) (dir string, asPG bool) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axdeploy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() != 0 {
		return dir, false
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		missing(t, "running as root and there is no postgres user to run initdb as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir, true
}

// serverPort returns a TCP port nobody listens on (at the time of asking).
func serverPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// run runs one of the server programs and fails t on error.
func (s *pgServer) run(name string, args ...string) {
	s.t.Helper()
	prog := filepath.Join(s.bin, name)
	cmd := exec.Command(prog, args...)
	if s.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", prog}, args...)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, s.logTail())
	}
}

// appendConf adds lines to the server's postgresql.auto.conf (read after
// postgresql.conf, so they win).
func (s *pgServer) appendConf(lines ...string) {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		s.t.Fatal(err)
	}
}

// newPrimary initdbs a cluster in a subdirectory of root, configured for
// streaming replication (asynchronous until makeSync), and starts it. It
// stops (immediately) when t ends.
func newPrimary(t *testing.T, root string, asPG bool) *pgServer {
	t.Helper()
	s := &pgServer{t: t, bin: pgBinDir(t), dir: filepath.Join(root, "primary"), port: serverPort(t), asPG: asPG}
	s.log = s.dir + ".log"
	s.run("initdb", "-D", s.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	s.appendConf(
		"listen_addresses = '127.0.0.1'",
		"port = "+strconv.Itoa(s.port),
		"unix_socket_directories = '"+root+"'",
		"wal_level = replica",
		"max_wal_senders = 4",
		"max_connections = 100",
		"shared_buffers = '32MB'",
		"fsync = off", // an immediate stop is not a power cut: the OS keeps the WAL
		"synchronous_commit = on",
		"wal_sender_timeout = '5s'",
	)
	s.start()
	return s
}

// newStandby takes a base backup of primary into a subdirectory of root
// (pg_basebackup -R), names itself "standby" to the primary, and starts
// streaming. Promoted, it asks for no synchronous standby of its own (it
// has none), as a managed database's failover would.
func newStandby(t *testing.T, root string, primary *pgServer) *pgServer {
	t.Helper()
	s := &pgServer{t: t, bin: primary.bin, dir: filepath.Join(root, "standby"), port: serverPort(t), asPG: primary.asPG}
	s.log = s.dir + ".log"
	s.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", s.dir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	s.appendConf(
		"port = "+strconv.Itoa(s.port),
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby'", primary.port),
		"synchronous_standby_names = ''",
		"wal_receiver_status_interval = '1s'",
	)
	s.start()
	return s
}

func (s *pgServer) start() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.dir, "-l", s.log, "-w", "-t", "60", "start")
	s.t.Cleanup(func() { s.stopIfRunning() })
}

// promote makes a standby a primary and waits until it is one.
func (s *pgServer) promote() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.dir, "-w", "-t", "60", "promote")
}

// stopImmediate stops the server the way a crash or a fenced failover
// does: no checkpoint, connections cut.
func (s *pgServer) stopImmediate() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop")
}

func (s *pgServer) stopIfRunning() {
	if _, err := os.Stat(filepath.Join(s.dir, "postmaster.pid")); err != nil {
		return
	}
	prog := filepath.Join(s.bin, "pg_ctl")
	cmd := exec.Command(prog, "-D", s.dir, "-m", "immediate", "-w", "stop")
	if s.asPG {
		cmd = exec.Command("runuser", "-u", "postgres", "--", prog, "-D", s.dir, "-m", "immediate", "-w", "stop")
	}
	_ = cmd.Run()
}

// dsn is a connection string to this server alone.
func (s *pgServer) dsn(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable connect_timeout=2", s.port, db)
}

// exec runs SQL on the server's database db.
func (s *pgServer) exec(db, sql string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn(db))
	if err != nil {
		s.t.Fatalf("connect to port %d: %v\n%s", s.port, err, s.logTail())
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

// makeSync makes commits wait for the standby named "standby" and waits
// until it is the synchronous standby.
func (s *pgServer) makeSync() {
	s.t.Helper()
	s.exec("postgres", "ALTER SYSTEM SET synchronous_standby_names = 'standby'")
	s.exec("postgres", "SELECT pg_reload_conf()")
	s.waitSync("sync")
}

// waitSync waits until the standby named "standby" streams from this
// server in the given sync_state ("sync" or "async").
func (s *pgServer) waitSync(state string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var got string
		err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'`).Scan(&got)
		if err == nil && got == state {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("standby not streaming in state %q (last: %q, %v)", state, got, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// failoverDSN is the multi-host connection string hosts use: the primary
// first, then the standby, for a read-write session.
func failoverDSN(db string, servers ...*pgServer) string {
	hosts := make([]string, len(servers))
	ports := make([]string, len(servers))
	for i, s := range servers {
		hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(s.port)
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable connect_timeout=2 target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), db)
}

func (s *pgServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "--- " + filepath.Base(s.dir) + " server log tail ---\n" + strings.Join(lines, "\n")
}

// logCount counts the lines of the server's log that contain text.
func (s *pgServer) logCount(text string) int {
	b, _ := os.ReadFile(s.log)
	return strings.Count(string(b), text)
}
