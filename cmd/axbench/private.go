package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// privateCluster is a throwaway PostgreSQL cluster that axbench starts
// itself (-private), so figures do not depend on a shared server's settings:
// the machine's shared server runs with autovacuum off, a CI setting no
// production server has, and a queue's speed over time is mostly a question
// of vacuum.
//
// It lives in a temporary directory, listens on 127.0.0.1 only, trusts
// local connections (nothing else can reach it) and is stopped and removed
// by stop, which benchMain defers, so an error or Ctrl-C cleans it up too.
// The postmaster runs in a session of its own (pg_ctl detaches it), so the
// terminal's Ctrl-C reaches only axbench, which then shuts it down. If
// axbench is killed outright the cluster is left running: its directory
// and the command that stops it are printed when it starts.
type privateCluster struct {
	dir     string // removed by stop
	data    string // PGDATA, inside dir
	logFile string
	bin     string
	osUser  string // run the binaries as this user through runuser; "" = as ourselves
	port    int
	url     string
	started bool
}

// privateConfig is what -private needs from the flags.
type privateConfig struct {
	bin           string
	parent        string
	port          int
	sharedBuffers string
	osUser        string
	extra         []string // name=value lines from -private-set
}

// startPrivateCluster runs initdb and pg_ctl start. On error nothing is
// left behind.
func startPrivateCluster(ctx context.Context, cfg privateConfig, progressf func(string, ...any)) (c *privateCluster, err error) {
	port := cfg.port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	} else if err := portFree(port); err != nil {
		return nil, fmt.Errorf("private cluster: port %d: %w (a leftover cluster? look for %s/axbench-pg-*)", port, err, cfg.parent)
	}
	dir, err := os.MkdirTemp(cfg.parent, "axbench-pg-")
	if err != nil {
		return nil, fmt.Errorf("private cluster: %w", err)
	}
	c = &privateCluster{dir: dir, data: filepath.Join(dir, "data"), logFile: filepath.Join(dir, "server.log"),
		bin: cfg.bin, port: port,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	defer func() {
		if err != nil {
			c.stop()
			c = nil
		}
	}()
	// initdb and postgres refuse to run as root: as root, hand the
	// directory to the PostgreSQL OS user and run them as that user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup(cfg.osUser)
		if err != nil {
			return c, fmt.Errorf("private cluster: running as root needs the OS user %q to run PostgreSQL: %w", cfg.osUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return c, fmt.Errorf("private cluster: %w", err)
		}
		c.osUser = cfg.osUser
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return c, fmt.Errorf("private cluster: %w", err)
	}
	progressf("private cluster: initdb in %s", c.data)
	// -N (no fsync of the new files): the cluster is thrown away, and
	// initdb's own sync has nothing to do with the server's durability
	// settings, which stay on.
	if out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C.UTF-8", "-N", "--no-instructions"); err != nil {
		hint := ""
		if c.osUser != "" {
			hint = fmt.Sprintf(" (user %s must be able to reach %s: see -private-dir)", c.osUser, dir)
		}
		return c, fmt.Errorf("private cluster: initdb%s: %w\n%s", hint, err, out)
	}
	conf, err := privateSettings(cfg, port, c.dir)
	if err != nil {
		return c, err
	}
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), conf); err != nil {
		return c, fmt.Errorf("private cluster: %w", err)
	}
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", c.logFile, "-w", "-t", "120", "start"); err != nil {
		return c, fmt.Errorf("private cluster: pg_ctl start: %w\n%s\nserver log:\n%s", err, out, tail(c.logFile, 20))
	}
	c.started = true
	stopCmd := filepath.Join(c.bin, "pg_ctl") + " -D " + c.data + " -m fast stop"
	if c.osUser != "" {
		stopCmd = "runuser -u " + c.osUser + " -- " + stopCmd
	}
	progressf("private cluster: listening on 127.0.0.1:%d; if axbench is killed, stop it with: %s; rm -rf %s", port, stopCmd, c.dir)
	return c, nil
}

// stop shuts the cluster down and removes its directory. It is safe to
// call more than once and ignores the caller's context, so a cancelled
// run still cleans up.
func (c *privateCluster) stop() {
	if c == nil || c.dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.started {
		// fast: roll back open transactions and disconnect clients (a
		// failed scenario may have left some), then a clean shutdown.
		if _, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
			_, _ = c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "-t", "30", "stop")
		}
		c.started = false
	}
	_ = os.RemoveAll(c.dir)
	c.dir = ""
}

// run runs one of the PostgreSQL binaries, as c.osUser when set. It gets a
// process group of its own so that a Ctrl-C in the terminal, meant for
// axbench, does not kill an initdb or a pg_ctl stop halfway.
func (c *privateCluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.osUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.osUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = c.dir // readable by the PostgreSQL user, unlike root's working directory
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// privateSettings returns the postgresql.conf lines of the private
// cluster. They aim at a production server on this machine, as a managed
// service would configure it; each line says why. Settings the report must
// show are set even when they equal PostgreSQL's default, so that the list
// of non-default settings printed at the top names them.
func privateSettings(cfg privateConfig, port int, socketDir string) (string, error) {
	ram := memTotal()
	var b strings.Builder
	line := func(name, value, why string) {
		fmt.Fprintf(&b, "%s = '%s'\t# %s\n", name, value, why)
	}
	b.WriteString("\n# axbench -private: a production-like throwaway cluster\n")
	line("port", strconv.Itoa(port), "not the shared server's")
	line("listen_addresses", "127.0.0.1", "local only: the cluster trusts every connection")
	line("unix_socket_directories", socketDir, "self-contained")
	line("shared_buffers", cfg.sharedBuffers, "stock 128MB is sized for a laptop; the table and its indexes should fit, as on a production server")
	if ram > 0 {
		line("effective_cache_size", fmt.Sprintf("%dMB", ram/2>>20), "half of RAM: a planner hint for the OS page cache (the machine is shared)")
	}
	line("maintenance_work_mem", "512MB", "lets one VACUUM pass hold the dead tuples of a large table")
	line("max_wal_size", "4GB", "stock 1GB checkpoints every few seconds under bulk load and wide batches")
	line("min_wal_size", "1GB", "keep recycled WAL segments instead of creating new ones")
	line("synchronous_commit", "on", "the default, set to show it: every commit waits for its WAL flush")
	line("fsync", "on", "the default, set to show it")
	line("autovacuum", "on", "the default, set to show it (the shared server has it off)")
	line("autovacuum_naptime", "15s", "stock 1min; managed services wake the launcher more often")
	line("log_autovacuum_min_duration", "0", "every autovacuum run is in the server log")
	line("random_page_cost", "1.1", "SSD storage, as managed services assume")
	line("track_io_timing", "on", "I/O time in pg_stat_statements and EXPLAIN")
	line("shared_preload_libraries", "pg_stat_statements", "which statements cost what (heldxmin reports them)")
	line("lc_messages", "C", "English server messages")
	for _, kv := range cfg.extra {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return "", fmt.Errorf("-private-set %q: want name=value", kv)
		}
		line(strings.TrimSpace(name), strings.TrimSpace(value), "-private-set")
	}
	return b.String(), nil
}

// memTotal is the machine's RAM in bytes, or 0 when unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// freePort asks the kernel for a port nobody listens on. Another process
// may take it before the postmaster binds it; pg_ctl start then fails
// with the server log's "could not bind" in the error.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("free port: not a TCP address")
	}
	return addr.Port, nil
}
