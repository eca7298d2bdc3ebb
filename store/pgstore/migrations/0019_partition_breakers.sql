-- ax:compatible-from 15
-- 0019_partition_breakers: a circuit breaker per partition of a kind
-- (FlowConfig.PartitionBreaker, issue 40).
--
-- The kind's breaker lives in flows.breaker; a partition's lives here, one
-- row per (kind, partition key), as a store.BreakerStatus in JSON. Only
-- failing partitions have a row: one that is open, half-open, or closed
-- counting failures in a row. A breaker that closes with no failure
-- counted is deleted, so the table grows with the partitions that fail,
-- not with all the partitions. Rows are read and written only while the
-- kind's flows row is held FOR UPDATE (claims decided in Go, FinishFlow
-- feeding breakers, SetPartitionBreaker), so that row orders them.
-- SetFlows without a partition breaker, or with another partition
-- source, deletes the kind's rows.
--
-- Older code ignores the table: v1.0.0's (schema 15) keeps running.
CREATE TABLE flow_partition_breakers (
    kind          text  NOT NULL,
    partition_key text  NOT NULL,
    breaker       jsonb NOT NULL,
    PRIMARY KEY (kind, partition_key)
);
