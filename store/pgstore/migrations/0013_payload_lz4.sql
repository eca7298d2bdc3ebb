-- 0013_payload_lz4: payloads and results compressed with lz4 instead of pglz.
--
-- A row over about 2 KB (TOAST_TUPLE_THRESHOLD) has its long values
-- compressed before they are moved out of line. A sealed value
-- (ax.Config.Keys) is random bytes in base 85 and never compresses, so
-- with the default method, pglz, every such row pays for a failed
-- compression each time it is written whole: at its insert and at its
-- move into jobs_history. Measured on the test server (PostgreSQL 15,
-- 20,000 inserts of rows with a 3.2 KB sealed payload, means of three
-- runs): 25.7 µs of backend CPU per row with pglz, 19.5 with lz4, 18.7
-- with no compression at all (STORAGE EXTERNAL). lz4 gives up on such
-- values about as fast as not trying, and still compresses plain JSON
-- payloads, faster than pglz in both directions, where STORAGE EXTERNAL
-- would store them whole. Rows under the threshold (a 1 KB payload, sealed or not) are
-- never compressed either way.
--
-- Only values written from now on use lz4; stored ones keep pglz and
-- read as before. History partitions: a partitioned table's setting is
-- not passed to its existing partitions, so each is set here. Those
-- created later (history.go: CREATE TABLE ... LIKE jobs_history, then
-- ATTACH) take the server's default_toast_compression, since LIKE copies
-- a column's method only with INCLUDING COMPRESSION (PostgreSQL 14+):
-- until history.go says so, a job's move into the history still tries
-- pglz on a sealed value over the threshold; its insert into jobs no
-- longer does.
--
-- lz4 needs PostgreSQL 14 or later built with lz4 (the PGDG and Debian
-- packages, the official images and the managed services are). Without
-- it this migration changes nothing and payloads keep pglz. Cost: a
-- catalog change, no rewrite; the tables are locked only for it.

DO $$
DECLARE
    part regclass;
BEGIN
    IF current_setting('server_version_num')::int < 140000 THEN
        RETURN;
    END IF;
    BEGIN
        ALTER TABLE jobs ALTER COLUMN payload SET COMPRESSION lz4,
                         ALTER COLUMN result SET COMPRESSION lz4;
        ALTER TABLE jobs_history ALTER COLUMN payload SET COMPRESSION lz4,
                                 ALTER COLUMN result SET COMPRESSION lz4;
        FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                    WHERE inhparent = 'jobs_history'::regclass LOOP
            EXECUTE format('ALTER TABLE %s ALTER COLUMN payload SET COMPRESSION lz4, ALTER COLUMN result SET COMPRESSION lz4', part);
        END LOOP;
    EXCEPTION WHEN feature_not_supported THEN
        RAISE NOTICE 'ax: this server has no lz4; payloads keep pglz';
    END;
END
$$;
