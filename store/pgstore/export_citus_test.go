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
func (c *CitusStore) SlotValue(i int) int32 { return c.slots[i] }

// RenderedStore returns a Store on c's pool and schema whose statements
// named by names (fields of queries: "claim", "extend") are render's
// rendering of today's, for the experiments of citusrouted_test.go.
func (c *CitusStore) RenderedStore(render func(string) string, names ...string) *Store {
	s := newStore(c.s.pool, c.s.opts)
	for _, n := range names {
		switch n {
		case "claim":
			s.q.claim = render(s.q.claim)
		case "extend":
			s.q.extend = render(s.q.extend)
		default:
			panic("RenderedStore: unknown statement " + n)
		}
	}
	return s
}

// GetSQL is the statement of Get: a job by ID, through jobs_all.
func (s *Store) GetSQL() string { return s.q.get }
