-- 0001_init: jobs, the tables around them, their indexes and the counters
-- kept by triggers.
--
-- Times are INTEGER microseconds since the Unix epoch (the store's clock),
-- UUIDs are 16-byte BLOBs (so that BLOB order is the UUIDs' byte order,
-- creation order for UUIDv7), payloads, results and other JSON are TEXT kept
-- byte for byte as given.

CREATE TABLE jobs (
    seq              INTEGER PRIMARY KEY,      -- rowid: insertion order
    id               BLOB    NOT NULL UNIQUE,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    metadata         TEXT,                     -- JSON object, NULL when empty
    state            TEXT    NOT NULL CHECK (state IN
                         ('scheduled', 'running', 'retrying', 'paused', 'succeeded', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL CHECK (priority BETWEEN 1 AND 3),
    run_at           INTEGER NOT NULL,
    scheduled_at     INTEGER NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    unique_key       TEXT,                     -- as given, NULL without a key
    unique_global    INTEGER NOT NULL DEFAULT 0,
    unique_finished  INTEGER NOT NULL DEFAULT 0,
    unique_period    INTEGER NOT NULL DEFAULT 0, -- seconds
    ukey             TEXT,                     -- the key in its scope (kind or global, window)
    ukeep            INTEGER NOT NULL DEFAULT 0, -- 1: succeeded and dead jobs hold ukey too
    errors           TEXT,                     -- JSON array of attempt errors, NULL when none
    lease_token      BLOB,
    lease_expires_at INTEGER,
    owner            TEXT    NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pause_requested  INTEGER NOT NULL DEFAULT 0,
    fence            INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    attempted_at     INTEGER,
    finished_at      INTEGER,
    result           TEXT,
    follow_ups       TEXT,                     -- JSON templates, NULL when none
    parent           BLOB,
    batch            BLOB
);

-- Claims: one range scan per (kind, priority), in (run_at, id) order, over
-- claimable rows only, so finished and running jobs never cost a claim.
CREATE INDEX jobs_claim ON jobs (kind, priority, run_at, id)
    WHERE state IN ('scheduled', 'retrying');

-- Unique keys, enforced by the index: a key is held in its scope by the
-- job that is live, or finished (not cancelled) when its scope keeps it.
CREATE UNIQUE INDEX jobs_ukey ON jobs (ukey)
    WHERE ukey IS NOT NULL AND state <> 'cancelled'
      AND (ukeep = 1 OR state IN ('scheduled', 'retrying', 'paused', 'running'));

-- RescueExpired: running jobs by lease expiry.
CREATE INDEX jobs_lease ON jobs (lease_expires_at, id)
    WHERE state = 'running';

-- Prune: final jobs by finish time.
CREATE INDEX jobs_finished ON jobs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Follow-ups by parent and batch children by batch.
CREATE INDEX jobs_parent ON jobs (parent, seq) WHERE parent IS NOT NULL;
CREATE INDEX jobs_batch ON jobs (batch, id) WHERE batch IS NOT NULL;

-- Jobs per kind and state, kept exact by the triggers below, so that
-- CountJobs reads a few rows whatever the history.
CREATE TABLE counts (
    kind  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (kind, state)
) WITHOUT ROWID;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO counts (kind, state, n) VALUES (NEW.kind, NEW.state, 1)
        ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
    UPDATE counts SET n = n - 1 WHERE kind = OLD.kind AND state = OLD.state;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
    WHEN OLD.state <> NEW.state BEGIN
    UPDATE counts SET n = n - 1 WHERE kind = OLD.kind AND state = OLD.state;
    INSERT INTO counts (kind, state, n) VALUES (NEW.kind, NEW.state, 1)
        ON CONFLICT (kind, state) DO UPDATE SET n = n + 1;
END;

-- Batches: the children's final-state counts (kept when children are
-- pruned), the pending count that triggers the completion job, and the
-- completion job's template.
CREATE TABLE batches (
    id           BLOB    PRIMARY KEY,
    completion   BLOB    NOT NULL,
    template     TEXT    NOT NULL,
    total        INTEGER NOT NULL,
    pending      INTEGER NOT NULL,
    succeeded    INTEGER NOT NULL DEFAULT 0,
    dead         INTEGER NOT NULL DEFAULT 0,
    cancelled    INTEGER NOT NULL DEFAULT 0,
    completed    INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER
);

-- Periodic schedules: the last fired tick is the guard of each tick.
CREATE TABLE periodic (
    name       TEXT    PRIMARY KEY,
    spec       TEXT    NOT NULL,
    last_tick  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    template   TEXT
);

-- Leadership leases.
CREATE TABLE leaders (
    name       TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    term       INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

-- Registered nodes.
CREATE TABLE nodes (
    name         TEXT    PRIMARY KEY,
    version      TEXT    NOT NULL,
    kinds        TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);

-- Kinds an operator paused (or paused and resumed).
CREATE TABLE kinds (
    kind       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- Request nonces of the HTTP API.
CREATE TABLE nonces (
    nonce      TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX nonces_expires ON nonces (expires_at);
