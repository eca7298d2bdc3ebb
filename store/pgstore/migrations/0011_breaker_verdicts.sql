-- 0011_breaker_verdicts: breaker verdicts recorded in a caller's
-- transaction (CompleteTx) without taking the kind's flows row.
--
-- A CompleteTx whose outcome changes its kind's breaker used to lock the
-- kind's flows row until the caller committed, so every claim of the kind,
-- on every host, waited for a user's transaction. It appends its verdict
-- here instead (an insert takes no lock others wait for), and whoever next
-- holds the kind's row to decide with the breaker folds the committed
-- verdicts into it, in seq order, and deletes them: a claim before it
-- decides (a claim in one round trip starts nothing of a kind with verdicts
-- waiting, and claims again with the row locked), a Finish that feeds the
-- breaker before its own outcomes. SetFlows without a breaker, and
-- SetBreaker by hand, discard them.
CREATE TABLE flow_breaker_verdicts (
    seq    bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind   text    NOT NULL,
    -- The attempt failed (OutcomeRetry, OutcomeDead) rather than
    -- succeeded.
    failed boolean NOT NULL
);
CREATE INDEX flow_breaker_verdicts_kind_idx ON flow_breaker_verdicts (kind, seq);
