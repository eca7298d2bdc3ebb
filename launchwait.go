package ax

import "time"

// maxLaunchWait bounds how long the claim loop waits, before a claim,
// for the goroutines of the jobs it just launched to run
// (letLaunchedRun): they normally take microseconds; handlers that
// compute without blocking can keep every processor for the Go
// scheduler's time slice (10 ms), and the claim does not wait for those.
const maxLaunchWait = time.Millisecond

// letLaunchedRun waits, at most maxLaunchWait (wait is the claim loop's
// timer, stopped), until the goroutines of the attempts launched to
// start at once have run. A claim asks for the slots free when it
// begins, and a freed slot wakes the claimer at once, so without this
// the next claim began while the jobs the last one launched had not yet
// been scheduled: their slots were still taken, and a host with short
// jobs claimed about half its workers per round, in two alternating
// halves (axbench throughput at 100 workers: 53 jobs per claim). The
// goroutine that runs last wakes the loop and goes on to the end of its
// handler first (the woken goroutine runs next on its processor), so
// handlers that return at once have freed their slots by then, and the
// claim takes them too; handlers that block (most real ones) park their
// goroutines and cost the loop nothing.
func (r *runtime) letLaunchedRun(wait *time.Timer) {
	select {
	case <-r.launchedRan: // from a round nobody waited for
	default:
	}
	if r.starting.Load() == 0 {
		return
	}
	wait.Reset(maxLaunchWait)
	select {
	case <-r.launchedRan:
	case <-wait.C:
	}
	wait.Stop()
}
