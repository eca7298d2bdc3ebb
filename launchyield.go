package ax

import goruntime "runtime"

// maxLaunchYields bounds how often the claim loop yields the processor
// before a claim (letLaunchedRun): enough for the goroutines of a round
// of thousands of jobs to get a turn on a few processors, few enough that
// a claim is never held back by more than a few scheduler turns.
const maxLaunchYields = 16

// letLaunchedRun yields the processor until the goroutines of the
// attempts launched to start at once have run (or maxLaunchYields turns
// passed). A claim asks for the slots free when it begins, and a freed
// slot wakes the claimer at once, so without this the next claim began
// while the jobs the last one launched had not yet been scheduled: their
// slots were still taken, and a host with short jobs claimed about half
// its workers per round, in two alternating halves (axbench throughput
// at 100 workers: 53 jobs per claim). Handlers that block (most real
// ones) park their goroutines and cost the loop nothing; handlers that
// return at once have freed their slots by then, and the claim takes
// them too.
func (r *runtime) letLaunchedRun() {
	for i := 0; i < maxLaunchYields && r.starting.Load() > 0; i++ {
		goruntime.Gosched()
	}
}
