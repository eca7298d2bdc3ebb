-- 0007_flow: flow control (store.FlowStore): kinds' flow settings and
-- state, the jobs' partition and sequence keys, partition rate buckets and
-- pending counters.
--
-- Claims of a flow-controlled kind lock its row in flows (FOR UPDATE, in
-- kind order), so that the limits hold across hosts: running counts are
-- computed under that lock from jobs_running_idx (they are bounded by the
-- concurrency limit, so counting is cheaper than keeping a counter that
-- every Finish and rescue would have to update); the rate bucket and the
-- breaker are read, changed in Go and written back before the lock is
-- released.

CREATE TABLE flows (
    kind        text        PRIMARY KEY,
    -- The store.FlowConfig as declared (JSON of the Go struct).
    config      jsonb       NOT NULL,
    declared_by text        NOT NULL,
    declared_at timestamptz NOT NULL,
    -- The store.BreakerStatus (JSON of the Go struct; {} is closed).
    breaker     jsonb       NOT NULL DEFAULT '{}',
    -- The kind's rate bucket: its theoretical arrival time (NULL: full).
    rate_tat    timestamptz,
    -- Pending jobs of the kind counted when MaxPending was last set, plus
    -- what inserts added since; flow_pending_deltas holds the rest.
    pending     bigint      NOT NULL DEFAULT 0
);

-- Partition rate buckets (FlowConfig.PartitionRate), one per key that
-- started a job.
CREATE TABLE flow_partition_buckets (
    kind          text        NOT NULL,
    partition_key text        NOT NULL,
    tat           timestamptz NOT NULL,
    PRIMARY KEY (kind, partition_key)
);

-- Changes of the pending counts made by state changes (claims, retries,
-- cancels, pauses, resumes). The trigger below appends a row instead of
-- updating flows.pending, so that it takes no row lock: a Finish or a
-- cancel touching several kinds cannot deadlock on counters or wait for an
-- insert. Inserts of a kind with MaxPending fold the committed deltas into
-- flows.pending under the kind's lock.
CREATE TABLE flow_pending_deltas (
    kind  text    NOT NULL,
    delta integer NOT NULL
);
CREATE INDEX flow_pending_deltas_kind_idx ON flow_pending_deltas (kind);

-- Kinds that have (or had) jobs with a sequence key: claims of them go the
-- flow way.
CREATE TABLE flow_sequence_kinds (
    kind text PRIMARY KEY
);

-- partition_key: '' when the kind has no partition source (or the job no
-- key). sequence_key: NULL for jobs outside sequences. pending_counted:
-- the job counts in its kind's pending counter (set by inserts of a kind
-- with MaxPending, and for the pending jobs present when it was set).
-- All three are catalog-only additions: no table rewrite.
ALTER TABLE jobs
    ADD COLUMN partition_key   text    NOT NULL DEFAULT '' CHECK (octet_length(partition_key) <= 1024),
    ADD COLUMN sequence_key    text    CHECK (octet_length(sequence_key) <= 1024),
    ADD COLUMN pending_counted boolean NOT NULL DEFAULT false;

-- Running jobs per kind and partition: concurrency limits count them.
CREATE INDEX jobs_running_idx ON jobs (kind, partition_key)
    WHERE state = 'running';

-- Claimable jobs per partition, for claims of partitioned kinds. Jobs
-- without a key are left out (so kinds without partitions pay nothing);
-- the partition '' is read through jobs_claim_idx.
CREATE INDEX jobs_partition_idx ON jobs (kind, partition_key, priority, run_at)
    WHERE state IN ('scheduled', 'retrying') AND partition_key <> '';

-- Live jobs of a sequence in (scheduled_at, id) order: a job may start
-- only when it is the first of them and none runs.
CREATE INDEX jobs_sequence_idx ON jobs (kind, sequence_key, scheduled_at, id)
    WHERE sequence_key IS NOT NULL AND state IN ('scheduled', 'retrying', 'running', 'paused');

-- A counted job moving into or out of pending (scheduled, retrying)
-- appends a delta. The WHEN clause is evaluated without calling the
-- function, so jobs of other kinds cost nothing.
CREATE FUNCTION flow_pending_delta() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO flow_pending_deltas (kind, delta)
    VALUES (NEW.kind, CASE WHEN NEW.state IN ('scheduled', 'retrying') THEN 1 ELSE -1 END);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_flow_pending AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.pending_counted AND
          (OLD.state IN ('scheduled', 'retrying')) <> (NEW.state IN ('scheduled', 'retrying')))
    EXECUTE FUNCTION flow_pending_delta();

-- A counted pending job deleted (by an operator: Prune deletes only final
-- jobs) leaves pending too.
CREATE FUNCTION flow_pending_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO flow_pending_deltas (kind, delta) VALUES (OLD.kind, -1);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_flow_pending_deleted AFTER DELETE ON jobs
    FOR EACH ROW
    WHEN (OLD.pending_counted AND OLD.state IN ('scheduled', 'retrying'))
    EXECUTE FUNCTION flow_pending_deleted();

-- A job of a sequence starts only through the flow claim, which sets
-- ax.flow_claim for its transaction and checks that the job heads its
-- sequence. Any other claim (a host that has not yet learnt that the kind
-- has sequences) skips the row instead of starting it out of order.
CREATE FUNCTION flow_sequence_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('ax.flow_claim', true), '') = 'on' THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_flow_sequence_guard BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.sequence_key IS NOT NULL AND NEW.state = 'running' AND OLD.state <> 'running')
    EXECUTE FUNCTION flow_sequence_guard();

-- A job of a sequence leaving running lets the next one start: listeners
-- are told, on the store's channel (the schema's name), with the kind.
CREATE FUNCTION flow_sequence_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA, json_build_object('kind', NEW.kind, 'run_at', now())::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_flow_sequence_moved AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.sequence_key IS NOT NULL AND OLD.state = 'running' AND NEW.state <> 'running')
    EXECUTE FUNCTION flow_sequence_moved();
