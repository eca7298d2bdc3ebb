package pgstore

// jitOffSQL turns PostgreSQL's JIT compilation off until the end of the
// transaction it runs in. The flow-control statements run with it (the
// flow claim's transaction sets it with its other settings): their plans
// carry subqueries whose estimated cost grows with the table's statistics
// (the partition keys' recursive scan, the sequence guard), and once
// autovacuum analyzed a table of 100,000 due jobs the flow claim's generic
// plan was estimated at 1.2 million, past jit_optimize_above_cost and
// jit_inline_above_cost. LLVM then compiled, optimized and inlined the
// statement on every execution: 1.7–2 s per claim of a statement that runs
// in under a millisecond, while the claim held its kinds' rows and every
// other claim of the kinds queued behind it (axbench flow at -n 100000:
// from 10,000 jobs/s to about 30). These statements never run long enough
// for compiled expressions to pay back. Inside a caller's transaction
// (CompleteTx) the setting lasts until that transaction ends.
const jitOffSQL = `SELECT ` + jitOff

// jitOff is jitOffSQL's setting alone, for the statements that set
// others beside it.
const jitOff = `set_config('jit', 'off', true)`
