package citustest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Node is a PostgreSQL server of the local test cluster (the coordinator
// or a worker), which a test may stop and start. A test that does must
// hold the tests' lock exclusively (Exclusive).
type Node struct {
	URL     string // how to reach it
	dataDir string
	bin     string // its PostgreSQL's bin directory
}

// LocalNode returns the node url reaches, which must run on this
// machine: the test is skipped when it cannot be controlled (not root,
// no pg_ctl).
func LocalNode(t testing.TB, url string) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("citustest: stopping a node needs root (it runs pg_ctl as the postgres user)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("citustest: %v", err)
	}
	defer conn.Close(context.Background())
	n := &Node{URL: url}
	var major int
	if err := conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('server_version_num')::int / 10000`).Scan(&n.dataDir, &major); err != nil {
		t.Fatalf("citustest: %v", err)
	}
	n.bin = fmt.Sprintf("/usr/lib/postgresql/%d/bin", major)
	if _, err := os.Stat(n.bin + "/pg_ctl"); err != nil {
		t.Skipf("citustest: no pg_ctl at %s", n.bin)
	}
	return n
}

// Stop stops the node in mode (immediate: as if it crashed).
func (n *Node) Stop(t testing.TB, mode string) {
	t.Helper()
	n.pgctl(t, "-m", mode, "-w", "stop")
}

// Start starts the node and waits until it answers.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	n.pgctl(t, "-l", n.dataDir+"/server.log", "-w", "start")
}

func (n *Node) pgctl(t testing.TB, args ...string) {
	t.Helper()
	line := n.bin + "/pg_ctl -D '" + n.dataDir + "'"
	for _, a := range args {
		line += " '" + a + "'"
	}
	cmd := exec.Command("su", "postgres", "-s", "/bin/sh", "-c", line)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("citustest: pg_ctl %v: %v\n%s", args, err, out)
	}
}
