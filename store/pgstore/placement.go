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
type placement struct {
	slot  int    // the slot's index (citus_slots.slot)
	value int32  // its value of shard
	salt  string // hex, mixed into the tokens of this Store's claims
}

// pairs returns the replacer pairs rendering the placement markers.
func (p *placement) pairs() []string {
	if p == nil {
		return []string{"{onshard:j}", "", "{onshard:h}", "", "{onshard}", "", "{token}", "gen_random_uuid()", "{shard}", "NULL"}
	}
	v := fmt.Sprint(p.value)
	return []string{
		"{onshard:j}", "j.shard = " + v + " AND ",
		"{onshard:h}", "h.shard = " + v + " AND ",
		"{onshard}", "shard = " + v + " AND ",
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
