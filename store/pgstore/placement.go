package pgstore

import (
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"
)

// placement says where a Store's statements run. nil, on PostgreSQL, is
// the whole schema. On Citus (NewCitus) it is one slot of a distributed
// schema: the statements name the slot's value of shard, so that Citus
// runs each on that one shard (a single-shard router statement), where
// alone it runs FOR UPDATE SKIP LOCKED.
//
// The statements are written once, with placement markers where they
// read or change jobs, rendered by pairs:
//
//	{onshard:j}  "j.shard = <value> AND " on Citus, "" on PostgreSQL
//	{onshard:h}  the same for alias h (jobs_history)
//	{onshard}    the same without an alias
//	{routed:j}   "j.shard = <value>::numeric AND " on Citus, "" on
//	             PostgreSQL: names the shard for Citus's routing but
//	             gives the worker's planner no index condition (below)
//	{routed}     the same without an alias
//	{token}      a new lease token: gen_random_uuid() on PostgreSQL, a
//	             token carrying the slot on Citus (tokenSQL)
//	{shard}      the slot's value of shard (NULL on PostgreSQL, where no
//	             statement uses it)
//
// The value is written into the statement, not passed as a parameter: a
// literal keeps the statement a router one on any plan, where Citus 13.2's
// generic plan of a statement with shard = $1 ran on every shard (an
// UPDATE ... FROM unnest) or was refused (a CTE) (docs/citus.md). A
// statement without its markers is not placed: TestCitusPlacedStatements
// checks each placed statement's every reference to jobs and
// jobs_history, and its plan.
//
// {routed:j} is for a reference to jobs that reaches its rows by tuple
// IDs (j.ctid = ANY (…)). shard leads the primary key and every unique
// index of a distributed schema, so with shard = <value> a worker may
// read the rows through any of them on that condition alone, which every
// row of the shard meets; once the shard's statistics call it empty (a
// drained queue's, TestCitusPlansAreLinear), that is the plan it picks,
// and it reads the whole shard. Compared with a numeric, shard is cast,
// which no index holds, while Citus, which strips implicit casts and
// casts the value to the column's type, still routes the statement to
// the one shard.
type placement struct {
	slot  int    // the slot's index (citus_slots.slot)
	value int32  // its value of shard
	salt  string // hex, mixed into the tokens of this Store's claims
}

// pairs returns the replacer pairs rendering the placement markers.
func (p *placement) pairs() []string {
	if p == nil {
		return []string{"{onshard:j}", "", "{onshard:h}", "", "{onshard}", "", "{routed:j}", "", "{routed}", "",
			"{token}", "gen_random_uuid()", "{shard}", "NULL"}
	}
	v := fmt.Sprint(p.value)
	return []string{
		"{onshard:j}", "j.shard = " + v + " AND ",
		"{onshard:h}", "h.shard = " + v + " AND ",
		"{onshard}", "shard = " + v + " AND ",
		"{routed:j}", "j.shard = " + v + "::numeric AND ",
		"{routed}", "shard = " + v + "::numeric AND ",
		"{token}", p.tokenSQL(),
		"{shard}", v,
	}
}

// tokenSQL is the lease token a claim on Citus gives a job of alias j:
// the slot in its first two bytes, so that Finish and ExtendLeases find
// the job's shard from the lease alone (tokenSlot), then 14 bytes of an
// MD5 of the job's ID, its fence before the claim (one more per claim, so
// a token is never given twice) and the Store's salt. Citus refuses
// gen_random_uuid() in a distributed UPDATE (a volatile function); md5
// and the casts are immutable. A token fences stale holders, it is no
// secret: the salt only keeps two Stores' tokens for one attempt apart.
func (p *placement) tokenSQL() string {
	return fmt.Sprintf(`('%04x' || substr(md5(j.id::text || ':' || j.fence::text || ':%s'), 5))::uuid`, uint16(p.slot), p.salt)
}

// tokenSlot returns the slot a Citus lease token carries (tokenSQL).
func tokenSlot(token uuid.UUID) int {
	return int(binary.BigEndian.Uint16(token[:2]))
}
