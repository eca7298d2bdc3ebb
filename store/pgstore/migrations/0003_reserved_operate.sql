-- PLACEHOLDER kept only on the operate branch: version 3 belongs to another
-- branch (0003: claim/finish/extend/rescue/prune; 0004: unique-key scopes).
-- Migrations are numbered without gaps, so this file stands in for it until
-- the branches merge. DELETE THIS FILE AT MERGE, keeping the real 0003.
SELECT 1;
