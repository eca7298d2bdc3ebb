-- The Citus step (MigrateCitus, citusmigrate.go): distribute jobs and
-- jobs_history by a synthetic int column, shard, that the Citus store
-- chooses at insert, so that every hot statement can name one shard
-- (Citus runs FOR UPDATE SKIP LOCKED only in a statement that does).
-- It runs after the numbered migrations, in their transaction, on the
-- search_path of the schema, and only on a schema with no jobs.
--
-- Every other table stays a plain table of the coordinator: Citus plans
-- a statement that names no distributed table as PostgreSQL does, so the
-- leader, nodes, kind, nonce and periodic statements run unchanged.

-- Citus refuses triggers on distributed tables. These six implement the
-- features the first Citus store refuses at registration (follow-up
-- templates and batches, 0006/0017; flow control's pending counts and
-- sequences, 0007). A trigger this step does not know fails it, so that a
-- migration adding one must decide what it becomes on Citus.
DO $known$
DECLARE
    unknown text;
BEGIN
    SELECT string_agg(t.tgrelid::regclass || '.' || t.tgname, ', ') INTO unknown
    FROM pg_trigger t
    WHERE t.tgrelid IN ('jobs'::regclass, 'jobs_history'::regclass) AND NOT t.tgisinternal
      AND t.tgname NOT IN ('jobs_state_changed', 'jobs_flush_batch_ends', 'jobs_flow_pending',
                           'jobs_flow_pending_deleted', 'jobs_flow_sequence_guard', 'jobs_flow_sequence_moved');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'the Citus step does not know the triggers %', unknown;
    END IF;
END
$known$;

DROP TRIGGER jobs_state_changed ON jobs;
DROP TRIGGER jobs_flush_batch_ends ON jobs;
DROP TRIGGER jobs_flow_pending ON jobs;
DROP TRIGGER jobs_flow_pending_deleted ON jobs;
DROP TRIGGER jobs_flow_sequence_guard ON jobs;
DROP TRIGGER jobs_flow_sequence_moved ON jobs;

-- No default: Citus refuses an INSERT that leaves the distribution column
-- out, so a statement that forgets to place its job fails instead of
-- piling every job on one shard. The same position in both tables (the
-- last), so that the history's INSERT ... SELECT * and jobs_all's UNION
-- ALL still line up, and Citus can push the view down shard by shard.
ALTER TABLE jobs ADD COLUMN shard integer NOT NULL;
ALTER TABLE jobs_history ADD COLUMN shard integer NOT NULL;

-- Citus wants the distribution column in every unique index. IDs are
-- made by AX (UUIDv7), so (shard, id) loses nothing; a unique key's
-- holders are all placed on one shard (the key's), so the key stays
-- unique across the cluster. The unique indexes are rewritten from the
-- catalog rather than copied here, so that a migration changing one
-- needs no edit of this file.
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey, ADD CONSTRAINT jobs_pkey PRIMARY KEY (shard, id);
DO $unique$
DECLARE
    r record;
    def text;
BEGIN
    FOR r IN SELECT i.indexrelid::regclass AS name, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i
        WHERE i.indrelid IN ('jobs'::regclass, 'jobs_history'::regclass) AND i.indisunique AND NOT i.indisprimary
    LOOP
        def := regexp_replace(r.def, ' USING (\w+) \(', ' USING \1 (shard, ');
        IF def = r.def THEN
            RAISE EXCEPTION 'cannot add shard to unique index %: %', r.name, r.def;
        END IF;
        EXECUTE format('DROP INDEX %s', r.name);
        EXECUTE def;
    END LOOP;
END
$unique$;

-- SELECT * is expanded when a view is made: add shard to jobs_all.
CREATE OR REPLACE VIEW jobs_all AS
    SELECT * FROM jobs
    UNION ALL
    SELECT * FROM jobs_history;

-- A co-location group of its own: the schema's shards are placed (and
-- may be moved) apart from every other distributed table's, on the
-- nodes that take shards now.
SELECT create_distributed_table('jobs', 'shard', colocate_with => 'none');
SELECT create_distributed_table('jobs_history', 'shard', colocate_with => 'jobs');

-- A slot is a value of shard that AX places jobs with: one per Citus
-- shard of jobs, the smallest int that hashes into it. (The ints 0..N-1
-- would hash several into one shard and leave others empty.) Slots are
-- never renumbered nor removed: a job's shard never changes (Citus
-- refuses to update the distribution column), so a slot must stay
-- claimable for as long as jobs hold its value. A shard move changes
-- nothing here; a later shard split would add slots.
-- job_ids: where a job with a unique key lives when that is not its ID's
-- shard (a unique key places its job by the key). An insert looks for
-- its IDs on their own shards only, in jobs, the history and here, so
-- that an ID cannot be taken twice across the cluster. A row outlives its
-- job (pruned): an insert that finds one checks the job's shard and
-- deletes it when the job is gone.
CREATE TABLE job_ids (
    shard     integer NOT NULL,
    id        uuid    NOT NULL,
    job_shard integer NOT NULL,
    PRIMARY KEY (shard, id)
);
SELECT create_distributed_table('job_ids', 'shard', colocate_with => 'jobs');

CREATE TABLE citus_slots (
    slot  integer PRIMARY KEY CHECK (slot >= 0),
    value integer NOT NULL UNIQUE
);
INSERT INTO citus_slots (slot, value)
SELECT row_number() OVER (ORDER BY shardid) - 1, v
FROM (
    SELECT DISTINCT ON (shardid) shardid, v
    FROM generate_series(0, 100 * (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'jobs'::regclass)) v,
         LATERAL get_shard_id_for_distribution_column('jobs', v) shardid
    ORDER BY shardid, v
) first;
DO $slots$
BEGIN
    IF (SELECT count(*) FROM citus_slots) <> (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'jobs'::regclass) THEN
        RAISE EXCEPTION 'not every shard of jobs has a slot';
    END IF;
END
$slots$;

-- The Citus steps applied, as schema_version records the numbered
-- migrations: NewCitus refuses a schema without this step.
-- citus_2pc: a Citus local table (on the coordinator, in Citus's
-- metadata), always empty. InsertTx and CompleteTx update no row of it in
-- the caller's transaction: a modification Citus executes locally makes
-- it commit the transaction through its two-phase commit, which it would
-- not do for a caller that writes plain tables of the coordinator and one
-- worker (it commits the worker first, then the coordinator: a crash in
-- between would keep the job and lose the caller's writes). Adding it
-- needs the coordinator in Citus's metadata (citus_set_coordinator_host).
CREATE TABLE citus_2pc (n integer);
SELECT citus_add_local_table_to_metadata('citus_2pc');

CREATE TABLE citus_steps (
    step       integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO citus_steps (step, name) VALUES (1, 'distribute');
