-- 0005_snoozes: a trace of snoozes. A snooze gives its attempt back and
-- records no error, so nothing showed that a job had been snoozed:
-- snoozes counts the attempts that ended in one, snoozed_at (µs) is when
-- the last did (store.JobRecord.Snoozes, SnoozedAt).

ALTER TABLE jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN snoozed_at INTEGER;
