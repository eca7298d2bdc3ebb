package deploytest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/axsched/ax/internal/pgtest"
	"github.com/axsched/ax/store/pgstore"
)

// TestRollingUpgrade: hosts of the previous release (built from the
// commit CHANGELOG.md names) run jobs on a database at that release's
// schema; main's migrations are applied while they run and schedule;
// hosts of main start beside them and the old ones stop, as a rolling
// deploy does. No job whose Schedule returned (on either version) may be
// lost or run twice. An old host started after the migration must refuse
// to start, naming the schema.
func TestRollingUpgrade(t *testing.T) {
	sideBySide(t)
	skipUnderRace(t)
	rs := releases(t)
	if len(rs) == 0 || rs[0].commit == "" {
		t.Fatal("CHANGELOG.md names no commit for the latest release")
	}
	prev := rs[0]
	built := time.Now()
	oldBins := releaseBinaries(t, prev.commit)
	newBins := currentBins(t)
	t.Logf("built %s (commit %s) and this tree in %s", prev.version, prev.commit[:12], time.Since(built).Round(time.Millisecond))

	dsn := pgtest.EmptyDSN(t)
	pool := pgtest.PoolFor(t, dsn)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, executionsTable); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	startProc(t, logs, "migrate-old", oldBins+"/loader", "-dsn", dsn, "-migrate").waitLine(t, "MIGRATED", time.Minute)
	var oldVersion int
	if err := pool.QueryRow(ctx, `SELECT max(version) FROM ax.schema_version`).Scan(&oldVersion); err != nil {
		t.Fatal(err)
	}

	run := 20 * time.Second
	if soak() {
		run = 90 * time.Second
	}
	const rate = 30
	n := strconv.Itoa(int(run.Seconds()) * rate)
	var old []*proc
	for i := range 2 {
		name := "old" + strconv.Itoa(i+1)
		old = append(old, startProc(t, logs, name, oldBins+"/worker", "-dsn", dsn, "-node", name))
	}
	for _, w := range old {
		w.waitLine(t, "READY", time.Minute)
	}
	oldLoader := startProc(t, logs, "old-loader", oldBins+"/loader", "-dsn", dsn, "-n", n, "-rate", strconv.Itoa(rate), "-ms", "200")
	oldLoader.waitLine(t, "READY", time.Minute)

	// main's migrations, online, while the old hosts claim, finish and
	// schedule.
	time.Sleep(run / 4)
	migStart := time.Now()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("main's migrations on a database in use by %s hosts: %v", prev.version, err)
	}
	migTook := time.Since(migStart)
	migratedAt := time.Now()

	// An old host started now runs on main's schema if the release's code
	// allows it (the schema promise, docs/compatibility.md), and refuses it
	// naming the schema otherwise.
	oldRuns := releaseRunsOnSchema(t, pool, prev.commit, oldVersion)
	late := startProc(t, logs, "old-late", oldBins+"/worker", "-dsn", dsn, "-node", "old-late")
	var refused bool
	if oldRuns {
		late.waitLine(t, "READY", time.Minute)
		old = append(old, late)
	} else {
		<-late.done
		lateLog, _ := os.ReadFile(late.stderr)
		refused = strings.Contains(string(lateLog), "database schema is newer than this code")
		if !refused {
			t.Errorf("a %s host started on main's schema did not refuse it clearly; its log:\n%s", prev.version, lateLog)
		}
	}

	var cur []*proc
	for i := range 2 {
		name := "new" + strconv.Itoa(i+1)
		cur = append(cur, startProc(t, logs, name, newBins+"/worker", "-dsn", dsn, "-node", name, "-say-finished"))
	}
	for _, w := range cur {
		w.waitLine(t, "READY", time.Minute)
	}
	newLoader := startProc(t, logs, "new-loader", newBins+"/loader", "-dsn", dsn, "-n", n, "-rate", strconv.Itoa(rate), "-ms", "200")
	newLoader.waitLine(t, "READY", time.Minute)

	// The old hosts go, one at a time, while both loaders schedule.
	time.Sleep(run / 4)
	for _, w := range old {
		w.stop(t, time.Minute)
		time.Sleep(time.Second)
	}
	oldLoader.waitLine(t, "DONE ", run+time.Minute)
	newLoader.waitLine(t, "DONE ", run+time.Minute)
	waitQuiet(t, pool, 2*time.Minute)

	oldIDs, newIDs := scheduledIDs(t, oldLoader), scheduledIDs(t, newLoader)
	oldErrs := oldLoader.has("ERROR ")
	execs := executions(t, pool)
	var oldAfter int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM executions WHERE node LIKE 'old%' AND started_at > $1`, migratedAt).Scan(&oldAfter); err != nil {
		t.Fatal(err)
	}
	var oldSchedAfter int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ax.jobs_all WHERE id = ANY($1) AND created_at > $2`, pgtest.IDs(oldIDs), migratedAt).Scan(&oldSchedAfter); err != nil {
		t.Fatal(err)
	}
	for _, w := range cur {
		w.stop(t, time.Minute)
	}
	v := judge(append(oldIDs, newIDs...), len(oldErrs)+len(newLoader.has("ERROR ")), jobStates(t, pool, "work"), execs, ackedSuccesses(t, cur...))

	figure(t, "%s (schema %d) to main (schema %d): migrations applied online in %s; %s", prev.version, oldVersion, pgstore.SchemaVersion(), migTook.Round(time.Millisecond), v)
	figure(t, "after the migration, %s hosts ran %d jobs and its client scheduled %d (Schedule errors %d); a %s host started after it ran: %t, refused to start: %t",
		prev.version, oldAfter, oldSchedAfter, len(oldErrs), prev.version, oldRuns, refused)
	if len(oldErrs) > 0 {
		t.Logf("first Schedule error of the %s client: %s", prev.version, oldErrs[0])
	}
	for _, w := range old {
		for msg, n := range logComplaints(t, w) {
			t.Logf("%s logged %d times: %s", w.name, n, msg)
		}
	}

	if v.lost > 0 {
		t.Errorf("%d jobs whose Schedule returned were lost: %v", v.lost, v.lostIDs)
	}
	if v.twice > 0 {
		t.Errorf("%d jobs ran twice: %v", v.twice, v.breachIDs)
	}
	if v.notDone > 0 {
		t.Errorf("%d jobs did not succeed", v.notDone)
	}
	if oldRuns && len(oldErrs) > 0 {
		t.Errorf("%s runs on main's schema by the promise, but its client's Schedule failed %d times", prev.version, len(oldErrs))
	}
}

// releaseRunsOnSchema reports whether the release's code (schema version
// oldVersion) may run on the database's schema, which main migrated: the
// same version, or only newer migrations that allow it, read the way the
// release's code reads them (pgstore.Migrate's compatible_from). A release
// before compatible_from existed refuses any newer schema.
func releaseRunsOnSchema(t *testing.T, pool *pgxpool.Pool, commit string, oldVersion int) bool {
	t.Helper()
	if oldVersion == pgstore.SchemaVersion() {
		return true
	}
	migrate, err := git("show", commit+":store/pgstore/migrate.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(migrate, "compatible_from") {
		return false
	}
	var needs int
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(max(coalesce(compatible_from, version)), 0) FROM ax.schema_version WHERE version > $1`, oldVersion).Scan(&needs); err != nil {
		t.Fatal(err)
	}
	return needs <= oldVersion
}

// logComplaints counts a worker's warnings and errors by message and error
// text (the first 160 bytes).
func logComplaints(t *testing.T, p *proc) map[string]int {
	t.Helper()
	f, err := os.Open(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ Level, Msg, Error string }
		if json.Unmarshal(sc.Bytes(), &l) != nil || (l.Level != "warn" && l.Level != "error") {
			continue
		}
		key := l.Msg + ": " + l.Error
		if len(key) > 160 {
			key = key[:160]
		}
		out[key]++
	}
	return out
}
