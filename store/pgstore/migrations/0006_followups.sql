-- 0006_followups: job results, follow-ups (jobs inserted when a job ends)
-- and batches (children whose last end inserts a completion job).
--
--   result      what the handler recorded: json, kept byte for byte.
--   follow_ups  the job's follow-up templates (JSON, see followup.go).
--   parent      the job whose end inserted this one.
--   batch_id    the batch this job is a child of, or completes.
--
-- The work that a job's end sets off is done by triggers, not by the
-- statements that end jobs (Finish, RescueExpired, cancels): every path to
-- a final state, present and future, runs it in its own transaction, so a
-- follow-up or a batch's completion can be neither lost nor doubled, and
-- those statements stay as they are. The row trigger fires only on rows
-- that change state and carry follow-ups or a batch; other jobs pay one
-- WHEN test per state change, and each statement that sets state one
-- call of the batch flush, which returns at once when no batch child
-- changed.
--
-- Cost: all four columns are added without a default, and batch_id's
-- default is set afterwards, so nothing is rewritten: catalog changes only.

ALTER TABLE jobs
    ADD COLUMN result     json,
    ADD COLUMN follow_ups json,
    ADD COLUMN parent     uuid,
    ADD COLUMN batch_id   uuid;

-- InsertBatch inserts children through the ordinary insert path (COPY for
-- most), inside a transaction that sets ax.batch_id locally: the children
-- get their batch without a second pass over them, and the insert code is
-- shared with Insert. Outside such a transaction the setting is unset or
-- empty, and batch_id is NULL.
ALTER TABLE jobs
    ALTER COLUMN batch_id SET DEFAULT nullif(current_setting('ax.batch_id', true), '')::uuid;

-- FollowUps: a job's follow-ups, oldest first.
CREATE INDEX jobs_parent_idx ON jobs (parent, created_at) WHERE parent IS NOT NULL;

-- BatchChildren: a batch's children by ID (keyset paging); CancelBatch.
CREATE INDEX jobs_batch_idx ON jobs (batch_id, id) WHERE batch_id IS NOT NULL;

-- A batch: its completion job (ID and template) and the counts of children
-- by final state. The counts survive the pruning of the children. The row
-- is updated once per child end, so leave room for HOT updates.
CREATE TABLE batches (
    id           uuid        PRIMARY KEY,
    completion   uuid        NOT NULL,
    template     json        NOT NULL,
    total        integer     NOT NULL CHECK (total >= 0),
    succeeded    integer     NOT NULL DEFAULT 0,
    dead         integer     NOT NULL DEFAULT 0,
    cancelled    integer     NOT NULL DEFAULT 0,
    completed    boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
) WITH (fillfactor = 50);

-- ax_uuidv7 returns a version 7 UUID (RFC 9562): the Unix time in
-- milliseconds in the first 48 bits, then random bits, as the IDs Go code
-- makes. Follow-ups inserted by the trigger need IDs made in the database.
-- gen_random_uuid gives version 4 (0100 in the version nibble, the high
-- half of byte 6) and the right variant; bits 52 and 53 turn 0100 into
-- 0111.
CREATE FUNCTION ax_uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- ax_insert_template inserts the job template t describes (a JSON object:
-- kind, payload as a JSON string holding the payload's exact text,
-- metadata, priority, run_at or delay in nanoseconds, max_attempts,
-- follow_ups) with ID new_id, parent parent_id and batch, without a
-- unique key; an ID that exists already inserts nothing. clamp moves a
-- run_at in the past to now. Listeners on channel hear of it when the
-- transaction commits.
CREATE FUNCTION ax_insert_template(t json, new_id uuid, parent_id uuid, batch uuid, clamp boolean, channel text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    due timestamptz := coalesce((t->>'run_at')::timestamptz,
        now() + (coalesce((t->>'delay')::bigint, 0) / 1000) * interval '1 microsecond');
BEGIN
    IF clamp AND due < now() THEN
        due := now();
    END IF;
    INSERT INTO jobs (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts,
        follow_ups, parent, batch_id)
    VALUES (new_id, t->>'kind', coalesce(t->>'payload', 'null')::json, (t->'metadata')::jsonb,
        (t->>'priority')::smallint, due, due, (t->>'max_attempts')::integer, t->'follow_ups', parent_id, batch)
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify(channel, json_build_object('kind', t->>'kind', 'run_at', due)::text);
    END IF;
END
$$;

-- batch_ends collects, during one statement, the ends (and reopenings) of
-- batch children as deltas of the batch counts; the statement's last
-- trigger moves them to batches, once per batch. Counting each end in the
-- batches row directly would update that row once per child: a chain of
-- row versions as long as the statement's children, and the row locked
-- from the first child until commit, which serializes every host ending
-- children of the batch. Rows live only inside the transaction that writes
-- them (the flush deletes them before the statement ends), so the table is
-- unlogged: no WAL, and a crash has nothing of it to recover.
CREATE UNLOGGED TABLE batch_ends (
    batch_id  uuid    NOT NULL,
    job_id    uuid    NOT NULL,
    succeeded integer NOT NULL,
    dead      integer NOT NULL,
    cancelled integer NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);

-- ax_job_state_changed runs what a job's change of state sets off, in the
-- changing statement:
--
--   into a final state: the job's follow-ups on that state are inserted
--   (fresh IDs, due their delay after now), and its batch end is noted in
--   batch_ends.
--
--   out of a final state (RunNow of a dead or cancelled job): its batch
--   end is taken back in batch_ends.
--
-- The setting ax.batch_ends tells the statement's flush that there is
-- something to do, so that statements without batch children pay one
-- test.
CREATE FUNCTION ax_job_state_changed() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    f json;
    st text := NEW.state;
    sign integer := 1;
BEGIN
    IF NEW.state IN ('succeeded', 'dead', 'cancelled') AND NEW.follow_ups IS NOT NULL THEN
        FOR f IN SELECT value FROM json_array_elements(NEW.follow_ups) LOOP
            IF EXISTS (SELECT 1 FROM json_array_elements_text(f->'on') AS s(state) WHERE s.state = NEW.state) THEN
                PERFORM ax_insert_template(f->'job', ax_uuidv7(), NEW.id, NULL, true, TG_TABLE_SCHEMA);
            END IF;
        END LOOP;
    END IF;
    IF NEW.batch_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.state NOT IN ('succeeded', 'dead', 'cancelled') THEN
        st := OLD.state;
        sign := -1;
    END IF;
    INSERT INTO batch_ends (batch_id, job_id, succeeded, dead, cancelled)
    VALUES (NEW.batch_id, NEW.id, sign * (st = 'succeeded')::integer, sign * (st = 'dead')::integer,
        sign * (st = 'cancelled')::integer);
    PERFORM set_config('ax.batch_ends', 'pending', true);
    RETURN NULL;
END
$$;

-- ax_flush_batch_ends applies a statement's batch_ends to the batches, in
-- batch ID order (so that two statements ending children of the same
-- batches lock their rows in one order and cannot deadlock), once per
-- batch. The flush that leaves a batch with no open child inserts its
-- completion job, once: the batch row's lock orders concurrent flushes,
-- and completed records that it happened. The completion job's own end
-- is not counted. A batch already completed stays completed when a child
-- is reopened.
CREATE FUNCTION ax_flush_batch_ends() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    r record;
    b batches%ROWTYPE;
BEGIN
    IF coalesce(current_setting('ax.batch_ends', true), '') = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('ax.batch_ends', '', true);
    FOR r IN
        WITH ends AS (DELETE FROM batch_ends RETURNING *)
        SELECT e.batch_id, sum(e.succeeded) AS succeeded, sum(e.dead) AS dead, sum(e.cancelled) AS cancelled,
            (array_agg(e.job_id ORDER BY e.job_id DESC))[1] AS last_job
        FROM ends e JOIN batches x ON x.id = e.batch_id AND x.completion <> e.job_id
        GROUP BY e.batch_id
        ORDER BY e.batch_id
    LOOP
        UPDATE batches SET
            succeeded = succeeded + r.succeeded,
            dead = dead + r.dead,
            cancelled = cancelled + r.cancelled
        WHERE id = r.batch_id
        RETURNING * INTO b;
        IF NOT b.completed AND b.succeeded + b.dead + b.cancelled >= b.total THEN
            UPDATE batches SET completed = true, completed_at = now() WHERE id = b.id;
            PERFORM ax_insert_template(b.template, b.completion, r.last_job, b.id, false, TG_TABLE_SCHEMA);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_state_changed
    AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
        AND (NEW.follow_ups IS NOT NULL OR NEW.batch_id IS NOT NULL)
        AND (NEW.state IN ('succeeded', 'dead', 'cancelled') OR OLD.state IN ('succeeded', 'dead', 'cancelled')))
    EXECUTE FUNCTION ax_job_state_changed();

-- Statement triggers fire after the statement's row triggers.
CREATE TRIGGER jobs_flush_batch_ends
    AFTER UPDATE OF state ON jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION ax_flush_batch_ends();
