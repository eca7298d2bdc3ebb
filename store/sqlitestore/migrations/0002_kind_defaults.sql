-- 0002_kind_defaults: each kind's job defaults (store.KindDefaulter): the
-- MaxAttempts and priority its handlers declare at their start, read by
-- a Scheduler that schedules a kind it does not handle. Jobs keep their
-- own max_attempts and priority; nothing else reads this table.
CREATE TABLE kind_defaults (
    kind         TEXT    PRIMARY KEY,
    max_attempts INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
