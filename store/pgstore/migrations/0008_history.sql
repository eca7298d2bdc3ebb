-- 0008_history: finished jobs leave the hot table.
--
-- jobs holds the live jobs (scheduled, retrying, paused, running), the jobs
-- that finished in the last moments, and the finished jobs whose unique key
-- the index still needs (below). Archive (archive.go) moves every other
-- finished job, in batches, to jobs_history, a table partitioned by day of
-- finished_at (UTC). Prune drops a day's partition once all of it is past
-- the retention, instead of deleting its rows one by one. So the hot
-- table's heap and indexes hold what the claim, finish and rescue paths
-- need and little more, however long the history is, and retention costs
-- a DROP TABLE a day rather than a DELETE per job.
--
-- Reads see both tables through the view jobs_all (Get, listings, counts,
-- follow-ups, batch children). A statement reads one snapshot, and a move
-- deletes from jobs and inserts into jobs_history in one statement, so a
-- read sees each job exactly once, in one table or the other. An operation
-- that changes a finished job (run-now of a dead or cancelled job, bulk
-- delete) first moves it back to jobs in its own transaction.
--
-- Unique keys are enforced by jobs_unique_scope_idx on jobs alone, so a
-- finished job whose key still holds stays in jobs: one whose scope keeps
-- finished jobs' keys (unique_finished; until pruned), and one with a
-- period, until the period has passed since it finished (its window, which
-- began before it was inserted, has then ended: a later insert computes a
-- later window, another key). jobs_kept_idx lists the first for Prune;
-- jobs_finished_idx, which Archive walks, now leaves them out.
--
-- Online: the history starts empty; the finished rows already in jobs move
-- over in Archive's batches as hosts run it (every rescue interval), each a
-- short transaction that locks only the rows it moves. Partitions are
-- created by Archive when a batch needs one (ATTACH PARTITION takes a SHARE
-- UPDATE EXCLUSIVE lock on jobs_history, which readers do not wait for).
-- Replacing jobs_finished_idx reads the table once, under Migrate's
-- transaction (about a second per million rows on the 2-core test machine).

CREATE TABLE jobs_history (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (finished_at);

ALTER TABLE jobs_history ALTER COLUMN finished_at SET NOT NULL;

-- Get, control and the listings of every state in ID order; one descent
-- per partition.
CREATE INDEX jobs_history_id_idx ON jobs_history (id);

-- Prune within the partition the retention boundary falls in.
CREATE INDEX jobs_history_finished_idx ON jobs_history (finished_at);

-- The listings of failed jobs, as jobs_failed_list_idx and
-- jobs_failed_kind_list_idx on jobs (0005).
CREATE INDEX jobs_history_failed_list_idx ON jobs_history (state, id)
    WHERE state IN ('dead', 'cancelled');
CREATE INDEX jobs_history_failed_kind_list_idx ON jobs_history (kind, state, id)
    WHERE state IN ('dead', 'cancelled');

-- FollowUps and BatchChildren, as on jobs (0006).
CREATE INDEX jobs_history_parent_idx ON jobs_history (parent, created_at) WHERE parent IS NOT NULL;
CREATE INDEX jobs_history_batch_idx ON jobs_history (batch_id, id) WHERE batch_id IS NOT NULL;

-- One name for both tables, with the same columns in the same order. A
-- later migration that adds a column to jobs adds it to jobs_history too
-- and recreates this view (SELECT * is expanded when a view is created).
CREATE VIEW jobs_all AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM jobs_history;

-- Finished jobs Archive may move, oldest first: every final job except
-- those that keep their key until pruned.
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE state = 'cancelled'
       OR (state IN ('succeeded', 'dead') AND (unique_key IS NULL OR NOT unique_finished));

-- Finished jobs that keep their key until pruned, for Prune.
CREATE INDEX jobs_kept_idx ON jobs (finished_at)
    WHERE state IN ('succeeded', 'dead') AND unique_key IS NOT NULL AND unique_finished;
