-- 0004_unique_scope: unique keys hold in their scope (store.UniqueScope).
--
--   unique_global    the key is unique across kinds, not only in its kind.
--   unique_finished  succeeded and dead jobs keep holding the key (until
--                    pruned), not only live ones.
--   unique_period    seconds; > 0 buckets the key by insert-time window.
--   unique_window    the insert's window of unique_period: floor(epoch
--                    seconds of the store clock / unique_period), 0 without
--                    a period. A later window is another key, so a job
--                    holds its key for the rest of its window even when
--                    finished.
--
-- jobs_unique_scope_idx replaces jobs_unique_key_idx. Its key is where a
-- unique key holds: the kind (or '' for a global key: no job has an empty
-- kind), the period and window, and the key. Its predicate is when a job
-- holds it: while live (scheduled, retrying, paused, running), or, when
-- the scope keeps finished jobs' keys (Finished or a Period), in every
-- state but cancelled. Since the predicate reads only the state and the
-- scope, every transition (Finish, RescueExpired, Control, Prune) frees or
-- keeps a key without knowing of keys; an insert or a run-now that would
-- take a held key is refused by the index itself.
--
-- Existing rows were written under the old rule: one key space across
-- kinds, held by every job but a cancelled one until pruned. They become
-- per-kind keys with unique_finished = true, the nearest scope that never
-- lets a key held before the upgrade be taken after it by a job of the
-- same kind: a finished job keeps its key until Prune deletes it, as
-- before, and new jobs of its kind inserted with the key in the default
-- scope see it held. Two things change for them: a job of another kind
-- no longer collides with their keys, and their records report the scope
-- {Finished: true}. As the old rows are pruned, only the new defaults
-- remain.
--
-- Cost: adding the columns only changes the catalog; the UPDATE rewrites
-- the rows that have a key, and the index is built in one pass, both
-- under Migrate's lock on the table.

ALTER TABLE jobs
    ADD COLUMN unique_global   boolean NOT NULL DEFAULT false,
    ADD COLUMN unique_finished boolean NOT NULL DEFAULT false,
    ADD COLUMN unique_period   integer NOT NULL DEFAULT 0 CHECK (unique_period >= 0),
    ADD COLUMN unique_window   bigint  NOT NULL DEFAULT 0;

UPDATE jobs SET unique_finished = true WHERE unique_key IS NOT NULL;

DROP INDEX jobs_unique_key_idx;

CREATE UNIQUE INDEX jobs_unique_scope_idx ON jobs
    ((CASE WHEN unique_global THEN '' ELSE kind END), unique_period, unique_window, unique_key)
    WHERE unique_key IS NOT NULL
      AND (state IN ('scheduled', 'retrying', 'paused', 'running')
           OR ((unique_finished OR unique_period > 0) AND state <> 'cancelled'));
