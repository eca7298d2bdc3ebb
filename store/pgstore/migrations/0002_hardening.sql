-- 0002_hardening: what the hardened Store contract needs of the jobs table.
--
--   scheduled_at     the run_at a job was inserted with; never changed after.
--   fence            the fencing token: one more with every claim.
--   pause_requested  a running job was paused; its attempt's end decides.
--   payload          json instead of jsonb: json keeps the text byte for byte
--                    (key order, whitespace, duplicate keys, numbers and
--                    escapes as written, \u0000 included) and still checks
--                    that it is JSON; jsonb normalizes all of these.
--
-- Existing rows get scheduled_at = run_at (their first run time is not
-- recorded anywhere; run_at is the best there is) and fence = attempt, so
-- that a running job's fence is not zero. Their payloads are jsonb's
-- normalized text, since the bytes they were inserted with are gone.
--
-- Cost: the first statement only changes the catalog (no default is
-- computed per row). The second rewrites the table and its indexes once,
-- computing the backfill in the same pass, since changing payload's type
-- needs a rewrite anyway and an UPDATE of every row would add a second pass
-- and leave a dead copy of each row behind. The rewrite holds an ACCESS
-- EXCLUSIVE lock on jobs until Migrate commits: 1.6 s for 200,000 jobs
-- (55 MB with indexes) on a shared 2-core test machine, so count several
-- seconds per million. Migrate a large table at a quiet time, or prune
-- finished jobs first.

ALTER TABLE jobs
    ADD COLUMN scheduled_at    timestamptz,
    ADD COLUMN fence           bigint  NOT NULL DEFAULT 0,
    ADD COLUMN pause_requested boolean NOT NULL DEFAULT false;

-- TYPE … USING to the same type is how one ALTER TABLE computes a column
-- from the others; all four subcommands share one rewrite.
ALTER TABLE jobs
    ALTER COLUMN scheduled_at TYPE timestamptz USING run_at,
    ALTER COLUMN scheduled_at SET NOT NULL,
    ALTER COLUMN fence TYPE bigint USING attempt,
    ALTER COLUMN payload TYPE json USING payload::json;
