-- 0007_node_keys: the IDs of the encryption keys each node holds
-- (store.NodeParams.KeyIDs, a JSON array, current key first), so that an
-- operator sees which hosts can open what a key seals before making it
-- current, and a process without keys sees that its cluster encrypts.
-- Never key material.

ALTER TABLE nodes ADD COLUMN key_ids TEXT NOT NULL DEFAULT '[]';
