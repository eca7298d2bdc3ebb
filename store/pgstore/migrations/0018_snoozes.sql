-- ax:compatible-from 15
-- 0018_snoozes: a trace of snoozes. A snooze gives its attempt back and
-- records no error, so nothing showed that a job had been snoozed (issue
-- 40: a job kept coming back later with no sign why). snoozes counts the
-- attempts that ended in one, snoozed_at is when the last did
-- (store.JobRecord.Snoozes, SnoozedAt); Finish sets both in the statement
-- that writes the snooze, so a snooze costs no extra write.
--
-- Cost: catalog-only additions (a constant default, a nullable column),
-- no table rewrite; jobs_history gets them too, its partitions with it,
-- and jobs_all is recreated to read them (SELECT * is expanded when a
-- view is created). Older code reads explicit column lists and ignores
-- them; its finishes leave them as they are.

ALTER TABLE jobs
    ADD COLUMN snoozes    integer     NOT NULL DEFAULT 0,
    ADD COLUMN snoozed_at timestamptz;

ALTER TABLE jobs_history
    ADD COLUMN snoozes    integer     NOT NULL DEFAULT 0,
    ADD COLUMN snoozed_at timestamptz;

CREATE OR REPLACE VIEW jobs_all AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM jobs_history;
