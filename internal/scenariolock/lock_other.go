//go:build !unix

package scenariolock

// Hold does nothing where there is no flock: the scenario packages need
// PostgreSQL's binaries and Unix processes, and skip elsewhere.
func Hold() error { return nil }
