package pgstore

// rescueScanSQL makes RescueExpired read jobs_busy_idx with a plain index
// scan rather than a bitmap scan, until the end of its transaction. The
// index gets an entry for every claim (a claim is never a HOT update), and
// the entries of finished jobs stay until vacuum removes them: at 24,000
// jobs/s that was 318,115 entries for 999 running jobs, and the planner's
// bitmap scan visited all of them and 18,009 heap pages on every rescue,
// 43 ms once a second on every host (axbench throughput, W=1000,
// auto_explain and pg_stat_statements; 8.2 ms with the plain scan). A bitmap scan never marks the entries it finds dead; a
// plain index scan marks each entry whose row is dead to every
// transaction on the server (kill_prior_tuple), so later scans, this host's and every other's, step
// over it without reading the heap, and each entry is visited about once
// instead of once per rescue per host until vacuum. The statement sorts
// the running jobs by expiry either way, so the scan's order costs
// nothing. Sequential scans are turned off too: without the bitmap scan,
// statistics taken while many jobs ran (or a small table, as in
// TestRescueStepsOverFinishedJobs) made the planner read the whole table
// instead, once a second on every host.
const rescueScanSQL = `SELECT ` + noBitmapScan + `, ` + noSeqScan + `, ` + genericPlan + `, ` + jitOff

// noBitmapScan and noSeqScan are rescueScanSQL's own settings.
const (
	noBitmapScan = `set_config('enable_bitmapscan', 'off', true)`
	noSeqScan    = `set_config('enable_seqscan', 'off', true)`
)
