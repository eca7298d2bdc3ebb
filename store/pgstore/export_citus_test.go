package pgstore

// SetMinCitusVersion makes NewCitus and MigrateCitus require Citus v (a
// version the test cluster does not have, to see the refusal) until the
// returned function restores MinCitusVersion.
func SetMinCitusVersion(v string) (restore func()) {
	minCitusVersion = v
	return func() { minCitusVersion = MinCitusVersion }
}

// CitusVersionAtLeast is citusVersionAtLeast.
var CitusVersionAtLeast = citusVersionAtLeast

// Store returns the Store the CitusStore shares pgstore's code through.
func (c *CitusStore) Store() *Store { return c.s }

// SlotValue returns the value of shard of slot i.
func (c *CitusStore) SlotValue(i int) int32 { return c.placed[i].place.value }

// SlotCount returns how many slots (shards) the CitusStore has.
func (c *CitusStore) SlotCount() int { return len(c.placed) }

// SlotStore returns the Store whose statements are placed on slot i.
func (c *CitusStore) SlotStore(i int) *Store { return c.placed[i] }

// TokenSlot is tokenSlot.
var TokenSlot = tokenSlot

// GetSQL is the statement of Get: a job by ID, through jobs_all.
func (s *Store) GetSQL() string { return s.q.get }

// TokenSQL is the lease token expression of a claim placed on slot.
func TokenSQL(slot int, salt string) string {
	return (&placement{slot: slot, salt: salt}).tokenSQL()
}

// CitusHotSQL returns the statements the Citus store runs on slot's
// shard, by name, as it renders them (an insert of two rows).
func (c *CitusStore) CitusHotSQL(slot int) map[string]string {
	p := c.placed[slot]
	q := p.BatchSQL()
	return map[string]string{
		"insert":        p.citusInsertSQL(2),
		"holders":       p.q.holders,
		"takenIDs":      p.sql(citusTakenIDsSQL),
		"peek":          p.sql(citusPeekSQL),
		"claim":         q["claim"],
		"claimIDs":      p.sql(citusPrefixed(citusClaimIDsSQL)),
		"claimOneKind":  p.q.claimOneKind,
		"claimOpen":     p.q.claimOpen,
		"claimLost":     p.q.claimLost,
		"extend":        q["extend"],
		"lock":          p.sql(citusLockSQL),
		"write":         p.sql(citusPrefixed(citusWriteSQL)),
		"expired":       p.sql(citusExpiredSQL),
		"archive":       p.sql(citusArchiveSQL),
		"move":          p.sql(citusMoveSQL),
		"moved":         p.sql(citusMovedSQL),
		"prune":         q["prune"],
		"pruneHistory":  p.sql(citusPruneHistorySQL),
		"controlLock":   p.sql(citusControlLockSQL),
		"restore":       p.sql(citusRestoreSQL),
		"unarchive":     p.sql(citusUnarchiveSQL),
		"heldInHistory": p.sql(citusHeldInHistorySQL),
	}
}

// CitusInsertSQL is the Citus store's insert of n rows on slot's shard.
func (c *CitusStore) CitusInsertSQL(slot, n int) string { return c.placed[slot].citusInsertSQL(n) }
