-- 0003_flow: flow control (store.FlowStore): each job's partition and
-- sequence keys, the kinds' stored flow settings with their breaker and
-- rate buckets, and the indexes claims read them through.

ALTER TABLE jobs ADD COLUMN partition_key TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN sequence_key TEXT;

-- Running jobs per kind and partition (concurrency limits).
CREATE INDEX jobs_running ON jobs (kind, partition_key) WHERE state = 'running';

-- A sequence's live jobs in (scheduled_at, id) order: its first one is the
-- only one that may start, and only while none of them runs.
CREATE INDEX jobs_sequence ON jobs (kind, sequence_key, scheduled_at, id)
    WHERE sequence_key IS NOT NULL AND state IN ('scheduled', 'retrying', 'paused', 'running');

-- A kind's flow settings (store.FlowConfig as JSON), its breaker
-- (store.BreakerStatus as JSON) and its rate bucket's theoretical arrival
-- time (µs, 0: full).
CREATE TABLE flows (
    kind        TEXT    PRIMARY KEY,
    config      TEXT    NOT NULL,
    declared_by TEXT    NOT NULL,
    declared_at INTEGER NOT NULL,
    breaker     TEXT    NOT NULL DEFAULT '{}',
    tat         INTEGER NOT NULL DEFAULT 0
);

-- The partitions' rate buckets.
CREATE TABLE flow_partitions (
    kind TEXT    NOT NULL,
    key  TEXT    NOT NULL,
    tat  INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
