-- 0003_reserved: a placeholder, so that this branch's 0004_unique_scope
-- applies in sequence before branch "scale"'s 0003 (claim, finish,
-- extend, rescue and prune indexes) is merged. It changes nothing. When
-- merging, keep scale's 0003 and delete this file: two files numbered
-- 0003 make Migrate fail with "out of sequence".
SELECT 1;
