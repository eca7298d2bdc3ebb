package deploytest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one worker or loader process; the test reads its stdout lines.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr string // its log file
	done   chan struct{}

	mu    sync.Mutex
	lines []string
	added chan struct{} // signalled on every new line
}

// startProc starts bin with args, logging stderr to a file in logDir; it
// is killed when t ends (its log tail printed if t failed).
func startProc(t *testing.T, logDir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{}), added: make(chan struct{}, 1)}
	p.stderr = filepath.Join(logDir, name+".log")
	errf, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = errf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	errf.Close()
	go p.read(out)
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Log(p.logTail())
		}
	})
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

// has returns the lines starting with prefix, without it.
func (p *proc) has(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// waitLine waits until the process printed a line starting with prefix
// and returns the rest of the first such line.
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
			t.Fatalf("%s exited before printing %q\n%s", p.name, prefix, p.logTail())
		case <-deadline.C:
			t.Fatalf("%s did not print %q within %s\n%s", p.name, prefix, timeout, p.logTail())
		}
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for the process to exit.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s of SIGTERM\n%s", p.name, timeout, p.logTail())
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
