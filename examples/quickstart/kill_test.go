//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/sqlitestore"
)

// TestKillAndRestart builds the quickstart, starts it on an SQLite file,
// SIGKILLs it once some work jobs are done, and runs it again on the same
// file: the jobs that were not finished when it died run in the second
// run, the finished ones do not run again, and every job's work is
// recorded exactly once. While the first process runs, a second one is
// refused the file.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the quickstart binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "quickstart")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	db := filepath.Join(dir, "q.db")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	command := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-db", db}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=", "AX_QUICKSTART_DB=")
		return cmd
	}

	// First run: killed once 8 work jobs are done.
	first := command("-work", "40", "-work-time", "100ms")
	stdout, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr1 bytes.Buffer
	first.Stderr = &stderr1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		lines1    []string
		eightDone = make(chan struct{})
	)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		done := 0
		for sc.Scan() {
			mu.Lock()
			lines1 = append(lines1, sc.Text())
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "work ") && strings.HasSuffix(sc.Text(), " done") {
				if done++; done == 8 {
					close(eightDone)
				}
			}
		}
	}()
	select {
	case <-eightDone:
	case <-scanned:
		t.Fatalf("the first run ended before 8 work jobs were done:\n%s", stderr1.String())
	case <-ctx.Done():
		t.Fatal("the first run did not get 8 work jobs done")
	}

	// Meanwhile, a second process is refused the file.
	var refused bytes.Buffer
	second := command("-work", "1")
	second.Stdout, second.Stderr = &refused, &refused
	err = second.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("a second process on the file: %v, want exit status 1\n%s", err, refused.String())
	}
	for _, want := range []string{"database file in use", "process "} {
		if !strings.Contains(refused.String(), want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, refused.String())
		}
	}

	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-scanned
	_ = first.Wait()

	// What the dead process left: the work jobs and their states.
	atKill := workJobs(t, db)
	finished, open := 0, 0
	for _, st := range atKill {
		if st.Final() {
			finished++
		} else {
			open++
		}
	}
	if finished < 1 || open < 1 {
		t.Fatalf("killed with %d work jobs finished and %d not: want some of each", finished, open)
	}
	t.Logf("killed with %d work jobs finished, %d not", finished, open)

	// Second run: finishes what the first left, and its own jobs.
	var out2, stderr2 bytes.Buffer
	rerun := command("-work", "3", "-work-time", "10ms")
	rerun.Stdout, rerun.Stderr = &out2, &stderr2
	if err := rerun.Run(); err != nil {
		t.Fatalf("second run: %v\n%s\n%s", err, out2.String(), lastLines(stderr2.String(), 30))
	}
	if !strings.Contains(out2.String(), "unfinished job(s) from an earlier run") || !strings.Contains(out2.String(), "all jobs succeeded") {
		t.Fatalf("second run output:\n%s", out2.String())
	}
	started := map[uuid.UUID]bool{}
	for _, line := range strings.Split(out2.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "work" && f[2] == "start" {
			started[uuid.MustParse(f[1])] = true
		}
	}
	for id, st := range atKill {
		switch {
		case st.Final() && started[id]:
			t.Errorf("job %s, %s before the kill, ran again", id, st)
		case !st.Final() && !started[id]:
			t.Errorf("job %s, %s at the kill, did not run after the restart", id, st)
		}
	}

	// Every work job succeeded, and its work was recorded exactly once.
	after := workJobs(t, db)
	if len(after) != len(atKill)+3 {
		t.Fatalf("%d work jobs after the second run, want %d", len(after), len(atKill)+3)
	}
	runs := recordedRuns(t, db)
	for id, st := range after {
		if st != store.StateSucceeded {
			t.Errorf("work job %s ended %s", id, st)
		}
		if runs[id] != 1 {
			t.Errorf("work job %s recorded %d times", id, runs[id])
		}
	}
	if len(runs) != len(after) {
		t.Errorf("%d jobs recorded, %d work jobs", len(runs), len(after))
	}
}

// workJobs returns the state of every work job in the file.
func workJobs(t *testing.T, path string) map[uuid.UUID]store.State {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[uuid.UUID]store.State{}
	after := uuid.Nil
	for {
		jobs, err := st.List(t.Context(), &store.ListParams{Kind: "work", After: after, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return out
		}
		for _, j := range jobs {
			out[j.ID] = j.State
		}
		after = jobs[len(jobs)-1].ID
	}
}

// recordedRuns counts the runs the work handler recorded, per job.
func recordedRuns(t *testing.T, path string) map[uuid.UUID]int {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.DB().QueryContext(t.Context(), `SELECT job_id, count(*) FROM quickstart_runs GROUP BY job_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[uuid.MustParse(id)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
