-- 0003_scale: fewer index entries per state transition, and lease
-- extensions that can be HOT updates.
--
-- A non-HOT update of a jobs row adds an entry to the primary key, to the
-- unique-key index when the row has a key, and to every partial index whose
-- predicate the new version satisfies. An update is HOT (no index entry at
-- all, and the old version pruned from its page without vacuum) only when
-- it changes no column an index uses, in its key or in its predicate.
--
--   jobs_lease_idx (lease_expires_at) WHERE state = 'running' put the lease
--       expiry in an index, so every lease extension (a heartbeat per
--       running job) was a non-HOT update adding three index entries.
--       RescueExpired reads the running jobs, at most as many as the
--       cluster's workers, through jobs_busy_idx instead and sorts them by
--       expiry; extensions, which change only lease_expires_at, can now be
--       HOT (with room on the page: fillfactor is 85).
--   jobs_paused_idx (kind) WHERE state = 'paused' served only the paused
--       counts, which jobs_busy_idx serves too.
--   jobs_busy_idx (kind, state) WHERE state IN ('running', 'paused') is
--       one index for both: the running and paused counts of CountJobs
--       read it by kind, RescueExpired by state. A claim adds one entry to
--       it, as it did to jobs_lease_idx.
--
-- State transitions (claim, finish, rescue) still change state, which every
-- partial index's predicate reads, so they cannot be HOT; each writes the
-- primary key and the one partial index of its new state (and the unique
-- key's, when set), as before.
--
-- Cost: building jobs_busy_idx reads the whole table once (a partial index
-- still scans every row) under a SHARE lock, which blocks writes to jobs
-- until Migrate commits: about a second per million rows on a 2-core test
-- machine. The index holds only running and paused jobs, so it is small.

CREATE INDEX jobs_busy_idx ON jobs (kind, state)
    WHERE state IN ('running', 'paused');

DROP INDEX jobs_lease_idx;
DROP INDEX jobs_paused_idx;
