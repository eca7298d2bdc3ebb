package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The server-side cost of a job: how many commits, how much WAL and how
// many heap-only (HOT) updates it takes, read from PostgreSQL's statistics
// before and after a run. Tables are found generically, as every table in
// the store's schema, because the storage layout is going to change (a
// history table may appear, the jobs table may be partitioned).

// dbStats is a snapshot of the counters a run compares.
type dbStats struct {
	lsn     string // pg_current_wal_lsn(): WAL written by the whole cluster
	walFPI  int64  // pg_stat_wal.wal_fpi: full-page images, cluster-wide
	commits int64  // pg_stat_database.xact_commit of this database
	tables  map[string]tableStats
}

// tableStats are one table's pg_stat_user_tables counters and its size.
type tableStats struct {
	ins, upd, hot, del  int64
	live, dead          int64
	autovacuums, bytes  int64
	autoanalyzes, scans int64
}

// readStats takes a snapshot. Counters are as fresh as the backends'
// last report (see settle).
func (d *benchDB) readStats(ctx context.Context) (dbStats, error) {
	s := dbStats{tables: map[string]tableStats{}}
	err := d.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text,
		(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())`).Scan(&s.lsn, &s.commits)
	if err != nil {
		return s, fmt.Errorf("read WAL position and commits: %w", err)
	}
	// pg_stat_wal is PostgreSQL 14+; without it FPIs are reported as 0.
	_ = d.pool.QueryRow(ctx, `SELECT wal_fpi FROM pg_stat_wal`).Scan(&s.walFPI)
	rows, err := d.pool.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
			n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count, coalesce(idx_scan, 0) + seq_scan,
			pg_total_relation_size(relid)
		FROM pg_stat_user_tables WHERE schemaname = $1`, d.store.Schema())
	if err != nil {
		return s, fmt.Errorf("read table statistics: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var t tableStats
		if err := rows.Scan(&name, &t.ins, &t.upd, &t.hot, &t.del, &t.live, &t.dead, &t.autovacuums,
			&t.autoanalyzes, &t.scans, &t.bytes); err != nil {
			return s, err
		}
		s.tables[name] = t
	}
	return s, rows.Err()
}

// walSince returns the WAL bytes written since lsn, cluster-wide.
func (d *benchDB) walSince(ctx context.Context, lsn string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&n)
	return n, err
}

// settle makes every backend of the database report its counters and
// waits until they have. A PostgreSQL 15 backend reports its statistics
// at most once a second while busy and, once idle, only after up to 10
// more seconds, or when it exits; so read right after a run, the
// counters would miss the run's last seconds. settle closes the admin
// pool's connections (the caller has closed the run's own pools), waits
// until no other client backend is connected to the database, then a
// little longer, because a backend leaves pg_stat_activity just before it
// writes its last report.
func (d *benchDB) settle(ctx context.Context) error {
	if d.via != "" {
		return d.settlePooled(ctx)
	}
	d.pool.Reset()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := d.count(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
		if err != nil {
			return fmt.Errorf("wait for backends to exit: %w", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for backends to exit: %d still connected after 30s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return nil
}

// statsDelta is what a run cost the server.
type statsDelta struct {
	jobs    int64 // jobs the run inserted and finished
	wal     int64
	walFPI  int64
	commits int64
	tables  []tableDelta
}

type tableDelta struct {
	name   string
	d      tableStats // counter differences; live, dead and bytes as at the end
	before tableStats
}

// costSince measures, after the run's pools are closed, what the server
// did since before; jobs is the number of jobs the run inserted and ran.
func (d *benchDB) costSince(ctx context.Context, before dbStats, jobs int64) (statsDelta, error) {
	if err := d.settle(ctx); err != nil {
		return statsDelta{}, err
	}
	after, err := d.readStats(ctx)
	if err != nil {
		return statsDelta{}, err
	}
	wal, err := d.walSince(ctx, before.lsn)
	if err != nil {
		return statsDelta{}, err
	}
	sd := statsDelta{jobs: jobs, wal: wal, walFPI: after.walFPI - before.walFPI, commits: after.commits - before.commits}
	for name, a := range after.tables {
		b := before.tables[name]
		sd.tables = append(sd.tables, tableDelta{name: name, before: b, d: tableStats{
			ins: a.ins - b.ins, upd: a.upd - b.upd, hot: a.hot - b.hot, del: a.del - b.del,
			autovacuums: a.autovacuums - b.autovacuums, autoanalyzes: a.autoanalyzes - b.autoanalyzes,
			scans: a.scans - b.scans, live: a.live, dead: a.dead, bytes: a.bytes,
		}})
	}
	slices.SortFunc(sd.tables, func(x, y tableDelta) int { return strings.Compare(x.name, y.name) })
	return sd, nil
}

func (sd statsDelta) perJob(v int64) float64 { return float64(v) / float64(max(sd.jobs, 1)) }

// hotShare is HOT updates / updates over every table, in percent.
func (sd statsDelta) hotShare() float64 {
	var upd, hot int64
	for _, t := range sd.tables {
		upd += t.d.upd
		hot += t.d.hot
	}
	return 100 * float64(hot) / float64(max(upd, 1))
}

// addMetrics records the per-job cost figures, each name prefixed.
func (sd statsDelta) addMetrics(r *result, prefix string) {
	r.add(prefix+"WAL per job", sd.perJob(sd.wal), "B/job")
	r.add(prefix+"full-page images per job", sd.perJob(sd.walFPI), "FPI/job")
	r.add(prefix+"commits per job", sd.perJob(sd.commits), "commits/job")
	r.add(prefix+"HOT share of updates, all tables", sd.hotShare(), "%")
}

// tableRows returns one row per table the run touched: label, then the
// columns of statsColumns.
func (sd statsDelta) tableRows(label string) [][]string {
	var out [][]string
	for _, t := range sd.tables {
		if t.d.ins+t.d.upd+t.d.del == 0 && t.d.dead == 0 {
			continue
		}
		hot := "-"
		if t.d.upd > 0 {
			hot = fmt.Sprintf("%.1f", 100*float64(t.d.hot)/float64(t.d.upd))
		}
		out = append(out, []string{label, t.name, fmt.Sprint(t.d.ins), fmt.Sprint(t.d.upd), fmt.Sprint(t.d.hot), hot,
			fmt.Sprint(t.d.del), fmt.Sprintf("%.2f", sd.perJob(t.d.upd)), fmt.Sprint(t.d.dead), fmt.Sprint(t.d.autovacuums), fmt.Sprint(t.d.autoanalyzes),
			fmt.Sprintf("%.1f", float64(t.d.bytes)/(1<<20))})
	}
	return out
}

// statsColumns are the columns of tableRows.
var statsColumns = []string{"run", "table", "ins", "upd", "hot_upd", "HOT %", "del", "upd/job", "dead at end", "autovacuums", "autoanalyzes", "size MB"}

// statsNote explains the cost figures; shared says whether other
// databases write WAL on the same server.
func statsNote(r *result, shared bool) {
	r.note("per job: over the whole run (insert, claim, heartbeat, finish, and the store's own traffic such as leader and node rows), divided by the jobs it ran (every job it inserted, unless a \"left\" figure says otherwise); statistics are read after every connection of the run closed, so they include its last seconds")
	r.note("WAL: pg_current_wal_lsn() difference, cluster-wide; full-page images: pg_stat_wal.wal_fpi, cluster-wide; commits: pg_stat_database.xact_commit of the run's database (autovacuum's included); HOT: pg_stat_user_tables.n_tup_hot_upd / n_tup_upd of every table in the store's schema")
	if shared {
		r.note("shared server: WAL and full-page images include whatever other databases on it wrote meanwhile")
	}
}

// planCount is how often the run's connections executed one prepared
// statement with a generic and with a custom plan.
type planCount struct {
	statement string
	generic   int64
	custom    int64
	conns     int
}

// planCounts reads pg_prepared_statements on every idle connection of pool
// (all of them once its scheduler stopped): pgx prepares and caches each
// statement per connection, and PostgreSQL plans the first five
// executions for their parameters, then switches to a generic plan when
// that looks no worse. A measurement short enough to stay on custom plans
// would hide a bad generic plan; this shows which plans a run really used.
func planCounts(ctx context.Context, pool *pgxpool.Pool) ([]planCount, error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	byStmt := map[string]*planCount{}
	for _, c := range conns {
		// This query is prepared on the connection too: leave it out.
		rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement NOT LIKE '%pg_prepared_statements%'`)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var stmt string
			var g, cu int64
			if err := rows.Scan(&stmt, &g, &cu); err != nil {
				rows.Close()
				return nil, err
			}
			key := statementLabel(stmt)
			pc := byStmt[key]
			if pc == nil {
				pc = &planCount{statement: key}
				byStmt[key] = pc
			}
			pc.generic += g
			pc.custom += cu
			pc.conns++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]planCount, 0, len(byStmt))
	for _, pc := range byStmt {
		out = append(out, *pc)
	}
	slices.SortFunc(out, func(a, b planCount) int { return int((b.generic + b.custom) - (a.generic + a.custom)) })
	return out, nil
}

// planRows formats plan counts for a table, most executed first.
func planRows(label string, pcs []planCount, top int) [][]string {
	var out [][]string
	for i, pc := range pcs {
		if i == top {
			break
		}
		out = append(out, []string{label, pc.statement, fmt.Sprint(pc.generic), fmt.Sprint(pc.custom), fmt.Sprint(pc.conns)})
	}
	return out
}

var planColumns = []string{"run", "statement", "generic", "custom", "conns"}

var spaces = regexp.MustCompile(`\s+`)

// statementLabel shortens a statement for a table: the name the store's
// code gives it when the text is one of the store's known shapes,
// otherwise its first words.
func statementLabel(sql string) string {
	s := strings.TrimSpace(spaces.ReplaceAllString(sql, " "))
	known := []struct{ prefix, name string }{
		{"WITH cand AS", "claim"},
		{"WITH input AS", "finish"},
		{"WITH locked AS MATERIALIZED ( SELECT j.id FROM", "extend leases"},
		{"WITH expired AS", "rescue"},
		{"INSERT INTO", "insert"},
		{"copy ", "insert (COPY)"},
		{"DELETE FROM", "delete/prune"},
	}
	label := ""
	for _, k := range known {
		if strings.HasPrefix(s, k.prefix) {
			label = k.name + ": "
			break
		}
	}
	return label + clip(s, 60)
}

// clip cuts s to n runes.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// topStatement is one row of pg_stat_statements.
type topStatement struct {
	query            string
	calls            int64
	totalMS, meanMS  float64
	rowsPerCall      float64
	blksPerCall      float64
	readBlksPerCall  float64
	dirtiedPerCall   float64
	sharePercentTime float64
}

// statStatements makes pg_stat_statements available in the database and
// reports whether it is loaded (shared_preload_libraries, as the private
// cluster has it).
func (d *benchDB) statStatements(ctx context.Context) bool {
	if err := d.exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false
	}
	_, err := d.count(ctx, "SELECT count(*) FROM pg_stat_statements LIMIT 1")
	return err == nil
}

// resetStatements clears pg_stat_statements for this database only (the
// server may be shared).
func (d *benchDB) resetStatements(ctx context.Context) error {
	return d.exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
}

// topStatements returns this database's n statements with the most
// execution time since the last reset.
func (d *benchDB) topStatements(ctx context.Context, n int) ([]topStatement, error) {
	rows, err := d.pool.Query(ctx, `WITH s AS (
			SELECT query, calls, total_exec_time, rows, shared_blks_hit + shared_blks_read AS blks,
				shared_blks_read, shared_blks_dirtied
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		)
		SELECT query, calls, total_exec_time, total_exec_time / greatest(calls, 1),
			rows::float8 / greatest(calls, 1), blks::float8 / greatest(calls, 1),
			shared_blks_read::float8 / greatest(calls, 1), shared_blks_dirtied::float8 / greatest(calls, 1),
			100 * total_exec_time / greatest((SELECT sum(total_exec_time) FROM s), 1e-9)
		FROM s ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (topStatement, error) {
		var t topStatement
		err := r.Scan(&t.query, &t.calls, &t.totalMS, &t.meanMS, &t.rowsPerCall, &t.blksPerCall,
			&t.readBlksPerCall, &t.dirtiedPerCall, &t.sharePercentTime)
		return t, err
	})
}

// statementColumns are the columns of statementRows, the first named first.
func statementColumns(first string) []string {
	return []string{first, "statement", "calls", "% time", "total ms", "mean ms", "rows/call", "blks/call", "read/call", "dirtied/call"}
}

func statementRows(label string, ts []topStatement) [][]string {
	var out [][]string
	for _, t := range ts {
		out = append(out, []string{label, statementLabel(t.query), fmt.Sprint(t.calls), fmt.Sprintf("%.1f", t.sharePercentTime),
			fmt.Sprintf("%.0f", t.totalMS), fmt.Sprintf("%.3f", t.meanMS), fmt.Sprintf("%.1f", t.rowsPerCall),
			fmt.Sprintf("%.0f", t.blksPerCall), fmt.Sprintf("%.1f", t.readBlksPerCall), fmt.Sprintf("%.1f", t.dirtiedPerCall)})
	}
	return out
}

// noteStorageParams notes the storage parameters (reloptions: per-table
// autovacuum thresholds, fillfactor) of the tables in the store's schema:
// with the server's settings they decide when vacuum and analyze run.
func (d *benchDB) noteStorageParams(ctx context.Context, r *result) error {
	rows, err := d.pool.Query(ctx, `SELECT c.relname, array_to_string(c.reloptions, ', ') FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.reloptions IS NOT NULL ORDER BY c.relname`, d.store.Schema())
	if err != nil {
		return err
	}
	params, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var name, opts string
		err := row.Scan(&name, &opts)
		return name + " (" + opts + ")", err
	})
	if err != nil {
		return err
	}
	if len(params) > 0 {
		r.note("storage parameters of the store's tables: %s", strings.Join(params, "; "))
	}
	return nil
}
