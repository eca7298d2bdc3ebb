// Package raceflag tells tests whether their binary was built with the
// race detector, for the scenario packages whose system under test runs
// in processes built without it (internal/deploytest,
// internal/faulttest): a second run of those scenarios under -race only
// doubles CI's minutes. The Citus conformance and model tests
// (store/pgstore/citusconformance) run one of their two shard counts
// under it, without the check of their statements' routing, and
// pgstore's archived conformance run and TestListOnLargeHistory (plans
// on a large history: the server's work) skip, for the same reason.
package raceflag
