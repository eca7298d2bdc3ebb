-- 0005_operate: what the operator API needs (store.JobInspector,
-- store.KindPauser, store.PeriodicController, store.NonceKeeper).
--
-- Every statement here changes the catalog only, or builds an index:
-- ADD COLUMN with a constant default rewrites nothing, and new tables are
-- empty. The two indexes are built in Migrate's transaction (CREATE INDEX
-- CONCURRENTLY cannot run in one), holding a SHARE lock on jobs until it
-- commits: inserts, claims and finishes wait meanwhile, about as long as a
-- scan of the table takes (a partial index still reads every row: 2.7 s
-- for both on 2,000,000 jobs, on a shared 2-core test machine; see
-- TestListOnLargeHistory). Migrate a large table at a quiet time, or prune
-- it first.

-- Listing failed jobs (dead or cancelled), newest or oldest first: the
-- dead letters operators look for among a long history of successes. A
-- page of dead jobs walks (state, id) from the cursor and stops after the
-- page. Both indexes are partial on dead and cancelled jobs only, so the
-- hot path pays nothing for them: claims, lease extensions, retries and
-- successes (most finishes) never write them; a job that dies or is
-- cancelled adds one entry to each. Succeeded jobs are most of the table,
-- and live jobs are few, so listings of those walk the primary key and
-- find their page quickly.
CREATE INDEX jobs_failed_list_idx ON jobs (state, id)
    WHERE state IN ('dead', 'cancelled');

-- The same for one kind: "dead jobs of kind k" walks (kind, state, id).
CREATE INDEX jobs_failed_kind_list_idx ON jobs (kind, state, id)
    WHERE state IN ('dead', 'cancelled');

-- Kinds an operator paused (or paused and resumed): hosts read the paused
-- ones at every heartbeat and leave them out of their claims.
CREATE TABLE kind_states (
    kind       text        PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 255),
    paused     boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Periodic schedules: an operator's pause, and the job template of the
-- latest declaration. The template is json, not jsonb, because json keeps
-- the text as written: its payload (a JSON string inside it) comes back
-- byte for byte.
ALTER TABLE periodic
    ADD COLUMN paused       boolean NOT NULL DEFAULT false,
    ADD COLUMN job_template json;

-- Request nonces of the HTTP API, remembered until they expire; expired
-- ones are deleted a few at a time by later calls, oldest first.
CREATE TABLE nonces (
    nonce      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

CREATE INDEX nonces_expires_idx ON nonces (expires_at);
