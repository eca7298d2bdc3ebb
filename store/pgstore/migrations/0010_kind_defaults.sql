-- 0010_kind_defaults: each kind's job defaults (store.KindDefaulter).
--
-- Hosts that handle a kind store its MaxAttempts and default priority at
-- their start; a host that schedules a job of a kind it does not handle
-- (ax serve, the HTTP API, a producer-only service) reads them, so the job
-- gets the same attempts and priority whoever scheduled it. Jobs keep
-- their own max_attempts and priority as before: nothing that claims,
-- finishes or rescues reads this table, so older hosts read the rows
-- newer ones insert unchanged. A new, empty table: the migration takes no
-- lock on jobs.
CREATE TABLE kind_defaults (
    kind         text        PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 255),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    priority     smallint    NOT NULL CHECK (priority BETWEEN 1 AND 3),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
