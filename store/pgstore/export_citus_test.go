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
