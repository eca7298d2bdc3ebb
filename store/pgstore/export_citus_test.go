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
