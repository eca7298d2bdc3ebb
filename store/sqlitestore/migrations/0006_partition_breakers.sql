-- 0004_partition_breakers: a circuit breaker per partition of a kind
-- (FlowConfig.PartitionBreaker): one row per failing partition (open,
-- half-open, or closed counting failures in a row), its breaker a
-- store.BreakerStatus in JSON. A breaker that closes with no failure
-- counted is deleted, so the table grows with the partitions that fail,
-- not with all of them.
CREATE TABLE flow_partition_breakers (
    kind    TEXT NOT NULL,
    key     TEXT NOT NULL,
    breaker TEXT NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
