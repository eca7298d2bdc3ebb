-- Placeholder on branch flow only: versions 3 to 6 are taken by branches
-- developed in parallel (claim/finish rewrite, unique scopes, listing,
-- results). Delete this file when merging; 0007_flow.sql follows them.
SELECT 1;
