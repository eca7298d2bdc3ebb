-- ax:compatible-from 13
-- Each migration records the oldest schema version whose code still runs
-- on the schema it leaves (NULL: its own version, a breaking migration).
-- Code that finds the schema newer than it knows reads this column to
-- decide whether to run (pgstore.Migrate, compatibleFromDirective).
ALTER TABLE schema_version ADD COLUMN compatible_from integer
    CHECK (compatible_from IS NULL OR (compatible_from >= 1 AND compatible_from <= version));
