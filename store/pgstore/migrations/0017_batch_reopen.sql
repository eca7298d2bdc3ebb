-- ax:compatible-from 15
-- 0017_batch_reopen: a batch child retried after its batch completed
-- reopens the batch, and the batch's next completion runs its completion
-- job again.
--
-- Before, RunNow of a dead or cancelled child of a completed batch took
-- its end back from the counts but left the batch completed, so when the
-- child ended again nothing ran: the completion job's view (say "1
-- delivered, 2 dead") stayed as it was after both were delivered. Now the
-- flush that leaves a completed batch with an open child reopens it
-- (completed false, completed_at NULL, reopened true), and the flush that
-- closes it again inserts the completion template again, as a new job: a
-- fresh UUIDv7 (the caller's ID names the first completion job, which
-- may still exist), the batch in batch_id, the child whose end closed the
-- batch in parent.
--
-- Completion jobs therefore always have a parent and children never do
-- (the completion of a batch of duplicates only, which older code stored,
-- is still told apart by batches.completion): ax_job_state_changed no
-- longer counts the end of a job with a parent as a child's end.
--
-- Older code on this schema: its BatchChildren and CancelBatch tell
-- children from the completion job by ID only, so after a batch completes
-- a second time they include the second completion job. Cost: one boolean
-- column with a constant default (no rewrite), two function bodies.

ALTER TABLE batches ADD COLUMN reopened boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION ax_job_state_changed() RETURNS trigger
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
    IF NEW.batch_id IS NULL OR NEW.parent IS NOT NULL THEN
        RETURN NULL; -- not in a batch, or a batch's completion job
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

-- ax_flush_batch_ends is 0006's, plus the reopening: a completed batch
-- left with an open child reopens, and its next completion inserts the
-- completion job under a fresh ID.
CREATE OR REPLACE FUNCTION ax_flush_batch_ends() RETURNS trigger
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
        IF b.completed AND b.succeeded + b.dead + b.cancelled < b.total THEN
            UPDATE batches SET completed = false, completed_at = NULL, reopened = true WHERE id = b.id;
        ELSIF NOT b.completed AND b.succeeded + b.dead + b.cancelled >= b.total THEN
            UPDATE batches SET completed = true, completed_at = now() WHERE id = b.id;
            PERFORM ax_insert_template(b.template, CASE WHEN b.reopened THEN ax_uuidv7() ELSE b.completion END,
                r.last_job, b.id, false, TG_TABLE_SCHEMA);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
