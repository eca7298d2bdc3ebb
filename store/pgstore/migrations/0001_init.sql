-- 0001_init: the jobs table, its indexes, and the tables of leadership, node
-- registration and periodic schedules.
--
-- Migrate runs this file inside a transaction holding an advisory lock, with
-- search_path set to the store's schema, so names here are unqualified.

CREATE TABLE jobs (
    id               uuid        PRIMARY KEY,
    kind             text        NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 255),
    payload          jsonb,
    metadata         jsonb,
    state            text        NOT NULL DEFAULT 'scheduled' CHECK (state IN
                         ('scheduled', 'running', 'retrying', 'paused', 'succeeded', 'dead', 'cancelled')),
    priority         smallint    NOT NULL CHECK (priority BETWEEN 1 AND 3),
    run_at           timestamptz NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    unique_key       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    lease_token      uuid,
    lease_expires_at timestamptz,
    owner            text        NOT NULL DEFAULT '',
    cancel_requested boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finished_at      timestamptz
);

-- Claims: one range scan per (kind, priority), in run_at order. Only
-- claimable rows are indexed, so finished jobs never cost a claim anything,
-- and far-future jobs sit after the run_at <= now() boundary of each range.
CREATE INDEX jobs_claim_idx ON jobs (kind, priority, run_at)
    WHERE state IN ('scheduled', 'retrying');

-- Idempotency keys: unique among the jobs that are not cancelled.
CREATE UNIQUE INDEX jobs_unique_key_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state <> 'cancelled';

-- RescueExpired: running jobs by lease expiry.
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at)
    WHERE state = 'running';

-- Prune: final jobs by finish time.
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Paused jobs are few and otherwise unindexed; counting and listing them
-- should not scan the table.
CREATE INDEX jobs_paused_idx ON jobs (kind)
    WHERE state = 'paused';

-- The jobs table is a queue: rows are updated several times and deleted.
-- Vacuum it after a small fraction of change rather than the default 20%,
-- so dead tuples do not pile up in the claim index, and keep some free space
-- on each page for HOT updates.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000,
    fillfactor = 85
);

-- The cluster's leader: at most one row per leadership name, held until
-- expires_at (store clock) unless renewed.
CREATE TABLE leader (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    term       bigint      NOT NULL DEFAULT 1,
    elected_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Nodes register themselves and heartbeat.
CREATE TABLE nodes (
    name          text        PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    metadata      jsonb
);

CREATE INDEX nodes_expires_idx ON nodes (expires_at);

-- Periodic schedules: the last tick fired, so restarts and downtime apply
-- the misfire policy instead of losing or repeating runs.
CREATE TABLE periodic (
    name       text        PRIMARY KEY,
    spec       text        NOT NULL DEFAULT '',
    last_tick  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
