-- 0009_history_window: repair the unique windows the history lost.
--
-- Until this release a move to jobs_history and a restore from it carried a
-- hand-kept list of columns that lacked unique_window, so every job with a
-- unique period that went through the history came back with window 0
-- (its key held in the wrong window; two such jobs of one key collided on
-- their way back). Moves now carry whole rows. This gives those rows the
-- window of their insert again, computed from created_at (the insert's
-- transaction start; the insert used its statement's time, so a job
-- inserted within moments of a window's end may land one window early,
-- which holds its key no longer than before).
--
-- jobs_history has no unique index: one statement. In jobs a repaired key
-- may meet a job holding the same key in that window (both kept it since
-- the loss); such a row keeps window 0, one row at a time, so that the
-- migration cannot fail on it. Only rows that lost their window are read
-- from jobs; the history is read once.

UPDATE jobs_history
SET unique_window = floor(extract(epoch FROM created_at) / unique_period)::bigint
WHERE unique_period > 0 AND unique_window = 0;

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT id FROM jobs WHERE unique_period > 0 AND unique_window = 0 LOOP
        BEGIN
            UPDATE jobs
            SET unique_window = floor(extract(epoch FROM created_at) / unique_period)::bigint
            WHERE id = r.id;
        EXCEPTION WHEN unique_violation THEN
            NULL;
        END;
    END LOOP;
END $$;
