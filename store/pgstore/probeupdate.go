package pgstore

import "strings"

// updateByProbeSQL returns an UPDATE of jobs from a batch given as
// arrays. input is a FROM item naming its rows x, x.id the job's ID; a
// probe by primary key per row (with filter, more conditions on j that
// each begin with " AND ") finds the job's tuple ID, the UPDATE writes set
// (on j and x) to the row at that tuple ID, and tail follows (a RETURNING
// list, or nothing). on is "{onshard:j}" for a statement of one Citus
// shard, "" elsewhere.
//
// On a Citus shard the UPDATE's own condition names the shard as
// {routed:j} does (placement.go) and takes the tuple IDs as an array: with
// shard = <value> beside a join on the tuple ID, a worker whose
// statistics called the shard empty hashed the whole shard once per call
// (TestCitusPlansAreLinear).
//
// As a join of the arrays with jobs, such an UPDATE let the planner put
// jobs outside the join, and once the statistics called jobs empty (a
// drained queue, its pages not yet vacuumed) its generic plan hashed or
// scanned all of jobs per call (the package doc: generic plans). A probe
// kept from being pulled up into a join (OFFSET 0) and a tuple ID leave
// the planner one way in.
//
// Only for rows the caller's transaction inserted or holds locked:
// nothing else can move them between the probe and the UPDATE, so the
// tuple ID the probe finds is the row the UPDATE writes.
func updateByProbeSQL(on, input, filter, set, tail string) string {
	target := ""
	if on != "" {
		target = strings.Replace(on, "{onshard:", "{routed:", 1) + "j.ctid = ANY (ARRAY(SELECT tid FROM found)) AND "
	}
	return `WITH found AS MATERIALIZED (
	SELECT p.tid, x.*
	FROM ` + input + `
	CROSS JOIN LATERAL (SELECT j.ctid AS tid FROM {jobs} j WHERE ` + on + `j.id = x.id` + filter + ` OFFSET 0) p
)
UPDATE {jobs} j SET ` + set + `
FROM found x
WHERE ` + target + `j.ctid = x.tid` + tail
}
