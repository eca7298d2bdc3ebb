package ax

// OutcomeQueueCapacity is outcomeQueueCapacity, for the tests of package
// ax_test that fill the outcome queue.
var OutcomeQueueCapacity = outcomeQueueCapacity
