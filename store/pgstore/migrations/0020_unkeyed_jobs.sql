-- ax:compatible-from 15
-- 0020_unkeyed_jobs: the partition "" of a partitioned kind gets an index
-- of its own, so that a claim never reads another partition's backlog.
--
-- A kind with a partition source claims partition by partition; the
-- partition "" holds its jobs without a key. jobs_partition_idx (0007)
-- leaves such jobs out (so kinds without partitions pay nothing), and the
-- flow claim read the partition "" through jobs_claim_idx, over every
-- claimable job of the kind: one partition's held backlog (its slots
-- full, its jobs due) was read by every claim and every NextRunAt of the
-- kind, and a healthy partition's jobs started later the deeper it grew
-- (issue 40, axbench noisy).
--
-- unkeyed marks a job of a kind with a partition source and no key:
-- pgstore writes it with the row (from Go, and in ax_insert_template for
-- jobs made from templates), and jobs_unkeyed_idx holds the claimable
-- ones, which are few. Jobs written without the mark (by older code
-- during a rolling deploy, or before their kind got a partition source)
-- are marked by the flow claim's sweep (unkeyed.go), at a host's first
-- claim of the kind and then every 5 seconds to a minute.
--
-- ax_insert_template also writes the template's sequence key, which it
-- dropped: a sequence's follow-ups, Then jobs and batch completions ran
-- side by side and out of order on PostgreSQL (the other stores kept it;
-- conformance area FlowPartitionPaths/SequenceKeyKept). Their kind is
-- recorded in flow_sequence_kinds as an insert from Go records it, so that
-- claims take the flow way for it (the sequence guard covers a host that
-- has not yet learnt it). Jobs the database inserts are not counted
-- against a MaxPending, as before.
--
-- Cost: catalog-only column additions (a constant default, no rewrite);
-- jobs_history gets the column too and jobs_all is recreated to read it;
-- the index build reads jobs once while Migrate holds its lock, and holds
-- only the few unkeyed claimable jobs. Older code ignores the column.

ALTER TABLE jobs ADD COLUMN unkeyed boolean NOT NULL DEFAULT false;

ALTER TABLE jobs_history ADD COLUMN unkeyed boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW jobs_all AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM jobs_history;

CREATE INDEX jobs_unkeyed_idx ON jobs (kind, priority, run_at)
    WHERE state IN ('scheduled', 'retrying') AND unkeyed;

CREATE OR REPLACE FUNCTION ax_insert_template(t json, new_id uuid, parent_id uuid, batch uuid, clamp boolean, channel text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    due timestamptz := coalesce((t->>'run_at')::timestamptz,
        now() + (coalesce((t->>'delay')::bigint, 0) / 1000) * interval '1 microsecond');
    tpayload json := coalesce(t->>'payload', 'null')::json;
    tmd jsonb := (t->'metadata')::jsonb;
    pkey text := ax_partition_key(t->>'kind', tmd, tpayload);
    skey text := nullif(t->>'sequence_key', '');
BEGIN
    IF clamp AND due < now() THEN
        due := now();
    END IF;
    INSERT INTO jobs (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts,
        follow_ups, parent, batch_id, partition_key, unkeyed, sequence_key)
    VALUES (new_id, t->>'kind', tpayload, tmd,
        (t->>'priority')::smallint, due, due, (t->>'max_attempts')::integer, t->'follow_ups', parent_id, batch,
        pkey, pkey = '' AND EXISTS (SELECT 1 FROM flows f WHERE f.kind = t->>'kind' AND f.config -> 'partition' IS NOT NULL),
        skey)
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;
    IF FOUND THEN
        IF skey IS NOT NULL THEN
            INSERT INTO flow_sequence_kinds (kind) VALUES (t->>'kind') ON CONFLICT DO NOTHING;
        END IF;
        PERFORM pg_notify(channel, json_build_object('kind', t->>'kind', 'run_at', due)::text);
    END IF;
END
$$;
