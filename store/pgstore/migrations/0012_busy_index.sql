-- 0012_busy_index: one index of the running and paused jobs instead of two.
--
-- A claim is a non-HOT update (state changes), so it adds an entry to the
-- primary key and to every partial index whose predicate the running row
-- satisfies: jobs_busy_idx (kind, state) WHERE state IN ('running',
-- 'paused'), for RescueExpired and the counts of running and paused jobs
-- (0003), and jobs_running_idx (kind, partition_key) WHERE state =
-- 'running', for the running counts of concurrency limits, per kind and
-- per partition (0007). Both held the same rows but the paused ones. One
-- index over (kind, state, partition_key) serves every one of those reads
-- with the same equalities (kind and state, and the partition for
-- partition limits), and a claim writes one index entry fewer: about 70
-- bytes of WAL per job, of about 1,430 once a job's end is its last write.
--
-- Cost: building the index reads the whole table once (a partial index
-- still scans every row) while Migrate holds its lock on jobs: about a
-- second per million rows on a 2-core test machine. The index holds only
-- running and paused jobs, so it is small.

CREATE INDEX jobs_busy_kind_idx ON jobs (kind, state, partition_key)
    WHERE state IN ('running', 'paused');

DROP INDEX jobs_busy_idx;
DROP INDEX jobs_running_idx;

ALTER INDEX jobs_busy_kind_idx RENAME TO jobs_busy_idx;
