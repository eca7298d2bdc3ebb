-- ax:compatible-from 15
-- 0016_template_partitions: jobs the database inserts from a template
-- (follow-ups, Then jobs, batch completions) get their partition key.
--
-- ax_insert_template left partition_key at its default, '', so every such
-- job of a partitioned kind shared the partition "" and one busy tenant's
-- full slots held back all the others (issue 40). Jobs inserted from Go
-- get their key from store.PartitionKeyOf; ax_partition_key is the same
-- rule in SQL, over the kind's PartitionSource as flows stores it now. A
-- conformance test runs PartitionKeyOf's cases through both and compares
-- them (storetest, area FlowPartitionPaths).
--
-- A key PartitionKeyOf would refuse (longer than 1,024 bytes, or not
-- storable as text) cannot refuse a job here, since the statement that
-- inserts the template is a finish, a cancel or a batch's last end: such a
-- job goes to the partition "". The exception block costs a
-- subtransaction, and only for kinds with a partition source.
--
-- Older code keeps working: the functions keep their signatures.

CREATE FUNCTION ax_partition_key(k text, md jsonb, payload json)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT AS $$
DECLARE
    src jsonb;
    key text;
BEGIN
    SELECT f.config -> 'partition' INTO src FROM flows f WHERE f.kind = k;
    IF src IS NULL THEN
        RETURN '';
    END IF;
    BEGIN
        IF src ? 'metadata' THEN
            key := md ->> (src ->> 'metadata');
        ELSIF src ? 'payload_field' AND json_typeof(payload) = 'object'
            AND json_typeof(payload -> (src ->> 'payload_field')) IN ('string', 'number', 'boolean') THEN
            -- json, not jsonb: a number keeps its text as written, and of
            -- a repeated field the last one counts, as in PartitionKeyOf.
            key := payload ->> (src ->> 'payload_field');
        END IF;
    EXCEPTION WHEN untranslatable_character OR invalid_text_representation
        OR character_not_in_repertoire OR invalid_parameter_value THEN
        key := NULL;
    END;
    IF key IS NULL OR octet_length(key) > 1024 THEN
        RETURN '';
    END IF;
    RETURN key;
END
$$;

CREATE OR REPLACE FUNCTION ax_insert_template(t json, new_id uuid, parent_id uuid, batch uuid, clamp boolean, channel text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    due timestamptz := coalesce((t->>'run_at')::timestamptz,
        now() + (coalesce((t->>'delay')::bigint, 0) / 1000) * interval '1 microsecond');
    tpayload json := coalesce(t->>'payload', 'null')::json;
    tmd jsonb := (t->'metadata')::jsonb;
BEGIN
    IF clamp AND due < now() THEN
        due := now();
    END IF;
    INSERT INTO jobs (id, kind, payload, metadata, priority, run_at, scheduled_at, max_attempts,
        follow_ups, parent, batch_id, partition_key)
    VALUES (new_id, t->>'kind', tpayload, tmd,
        (t->>'priority')::smallint, due, due, (t->>'max_attempts')::integer, t->'follow_ups', parent_id, batch,
        ax_partition_key(t->>'kind', tmd, tpayload))
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify(channel, json_build_object('kind', t->>'kind', 'run_at', due)::text);
    END IF;
END
$$;
