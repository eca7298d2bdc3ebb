package faulttest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
)

// TestCompleteTxHeldOpen: host a's txhold handlers call CompleteTx and
// then keep their transaction open for twice the lease (4s with the 2s
// lease), holding their jobs' rows, while a and b run work jobs of 3s. a's
// lease extensions must not wait on those rows (issue 23, defect 2: they
// did, a's other leases lapsed, b rescued and ran those jobs again), and an
// extension after a commit must not call the job lost (defect 3). No job
// runs twice, every one succeeds, each txhold job commits its row once on
// its first attempt, and neither host reports a lease lost (no
// EventLeaseLost, no "job lease lost" or refused-result ERROR).
func TestCompleteTxHeldOpen(t *testing.T) {
	sideBySide(t)
	const (
		holds = 4 // txhold jobs at once, each holding a connection of a
		waves = 2
		works = 60
		hold  = 4 * time.Second // twice the lease
	)
	c := newCluster(t)
	c.resultsTables()
	a := c.start("a", "", append(append([]string(nil), fastFailover...), "-txhold", "-max-conns", "16")...)
	// b has few workers, so that a takes most work jobs (the ones whose
	// leases its held transactions would hold back) and b is there to
	// rescue, and run again, any lease a lets lapse.
	b := c.start("b", "", append(append([]string(nil), fastFailover...), "-workers", "8")...)

	var held []string
	for w := range waves {
		reqs := make([]ax.Request, holds)
		for i := range reqs {
			reqs[i] = ax.Request{Kind: "txhold", Payload: map[string]int64{"hold_ms": hold.Milliseconds()}}
		}
		res, err := c.ax.ScheduleMany(context.Background(), reqs)
		require.NoError(t, err)
		for _, r := range res {
			held = append(held, r.ID.String())
		}
		// The work jobs start while the rows are held: a's share of them
		// needs its extensions to go through.
		c.waitFor("every txhold job of the wave to hold its transaction", 20*time.Second, func() bool {
			return len(a.has("TXHELD ")) >= (w+1)*holds
		})
		c.schedule(mixed(works/waves, 0, 3000))
	}

	took := c.waitAllSucceeded(60 * time.Second)
	c.waitFor("every txhold job to succeed", 60*time.Second, func() bool {
		return c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'txhold' AND state = 'succeeded'`) == len(held)
	})
	tl := c.tally()
	onA := c.count(`SELECT count(*) FROM executions WHERE node = 'a'`)
	figure(t, "%d work jobs (3s each; %d on a while %d transactions at a time stayed open %s after CompleteTx) in %s: executions %d, duplicates %d",
		tl.jobs, onA, holds, hold, took.Round(100*time.Millisecond), tl.executions, tl.duplicated)
	require.Equal(t, works, tl.jobs)
	require.Zero(t, tl.duplicated, "work jobs ran twice")
	require.Equal(t, works, tl.executions, "every work job exactly once")
	require.NotZero(t, onA, "a ran no work job: the scenario tested nothing")
	for _, p := range []*proc{a, b} {
		require.Empty(t, p.has("EVENT lease_lost"), "%s emitted EventLeaseLost", p.name)
	}
	require.Equal(t, len(held), c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'txhold' AND attempt = 1`),
		"txhold jobs ran again")
	require.Equal(t, len(held), c.count(`SELECT count(*) FROM tx_rows`), "one committed row per txhold job")
	require.Equal(t, len(held), c.count(`SELECT count(DISTINCT job_id) FROM tx_rows WHERE node = 'a' AND attempt = 1`))
	for _, p := range []*proc{a, b} {
		log, err := os.ReadFile(p.stderr)
		require.NoError(t, err)
		for _, msg := range []string{"job lease lost", "attempt result refused"} {
			require.False(t, strings.Contains(string(log), msg), "%s logged %q", p.name, msg)
		}
	}
}
