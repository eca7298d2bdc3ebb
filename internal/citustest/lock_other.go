//go:build !unix

package citustest

import "testing"

// holdLock does nothing where there is no flock: the tests that stop a
// node skip there (they need a local cluster's processes).
func holdLock(testing.TB, bool) {}
