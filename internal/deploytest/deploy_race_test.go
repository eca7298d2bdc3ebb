//go:build race

package deploytest

// raceEnabled: the test binary was built with -race.
const raceEnabled = true
