-- 0004_batch_reopen: a batch child taken out of a final state (RunNow)
-- after its batch completed reopens the batch (completed = 0 again);
-- reopened records that the completion job was inserted once already, so
-- that the batch's next completion inserts it again as a new job, under
-- a fresh ID.

ALTER TABLE batches ADD COLUMN reopened INTEGER NOT NULL DEFAULT 0;
