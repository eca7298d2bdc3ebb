package pgstore

import (
	"strings"
	"time"

	"github.com/axsched/ax/store"
)

// BatchSQL returns the batched statements TestGenericPlansAreLinear plans,
// by name.
func (s *Store) BatchSQL() map[string]string {
	return map[string]string{
		"claim":      s.q.claim,
		"claimLost":  s.q.claimLost,
		"claimOpen":  s.q.claimOpen,
		"claimOne":   s.q.claimOneKind,
		"finish":     s.q.finish,
		"finishWait": s.q.finishWait,
		"extend":     s.q.extend,
		"insertMany": s.q.insertMany,
		"holders":    s.q.holders,
		// A finish's results and an insert's follow-ups (followup.go).
		"results":   s.sql(resultsSQL),
		"followUps": s.sql(followUpsSQL),
		// A batch's cancel (batch.go).
		"cancelBatch": s.sql(cancelBatchSQL),
		// The operator's bulk changes of the jobs they picked (bulk.go).
		"bulkCancel": strings.ReplaceAll(bulkApplySQL[store.BulkCancel], "{jobs}", s.jobsTable()),
		"bulkDelete": strings.ReplaceAll(bulkApplySQL[store.BulkDelete], "{jobs}", s.jobsTable()),
		"bulkRunNow": s.runNowSetSQL(),
		"rescue":     s.q.rescue,
		"prune":      s.q.prune,
		// The flow-controlled kinds' (flowqueries.go).
		"flowClaim":  s.flowQ().claim,
		"flowFinish": s.flowQ().finish,
		"setKeys":    s.flowQ().setKeys,
		// The history's (history.go).
		"archive":      s.sql(archiveSQL),
		"move":         s.sql(moveSQL),
		"restore":      s.sql(restoreSQL("$1::uuid[]")),
		"pruneHistory": s.pruneHistorySQL(time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)),
	}
}

// RescueScanSQL is the settings statement RescueExpired runs before its
// rescue, in the same transaction.
const RescueScanSQL = rescueScanSQL

// PlainClaimOrderSQL is the claim order's ORDER BY list, over columns
// aged, priority, run_at and id.
const PlainClaimOrderSQL = plainClaimOrderSQL
