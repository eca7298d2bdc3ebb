package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// The methods the ax package finds by type assertion (ax.CompleteTxOf,
// ax.ScheduleTxOf, ax.ScheduleBatchTxOf): a change of signature here must fail to compile, not
// make those calls return ErrTxUnsupported at run time.
var _ interface {
	CompleteTx(context.Context, *sql.Tx, store.FinishParams) (bool, error)
	InsertTx(context.Context, *sql.Tx, []store.InsertParams) ([]store.InsertResult, error)
	InsertBatchTx(context.Context, *sql.Tx, *store.BatchParams) (*store.BatchResult, error)
} = (*Store)(nil)

// CompleteTx applies one attempt's outcome (normally OutcomeSucceeded, with
// its Result and Then jobs) inside tx, a transaction of the caller's on
// the Store's file (begin it on DB), so that the job's end and the
// caller's own writes commit or roll back together: ax.CompleteTxOf calls
// it for a handler that finishes its job in its business transaction.
//
// The write is fenced by the lease, as Finish is: it applies only while
// the job runs under params.Lease.Token, and then returns true. It returns
// false, changing nothing, when the lease is no longer held: the caller
// must roll tx back. Follow-ups, Then jobs, batch progress and breaker
// verdicts the end sets off are written in tx too.
//
// tx holds the file's single writer connection until it ends: the
// Store's other writes (the host's lease extensions and outcomes
// included) wait for it, so keep it short. Once tx committed, an extension
// of the lease reports it finished by its holder, not lost; rolled back,
// the job is running as before. Subscribers are notified at once, as by
// InsertTx. On error, roll tx back.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, params store.FinishParams) (bool, error) {
	if tx == nil {
		return false, fmt.Errorf("complete job %s in tx: %w: nil transaction", params.Lease.ID, store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return false, fmt.Errorf("complete job %s in tx: %w", params.Lease.ID, err)
	}
	if err := s.usable(ctx); err != nil {
		return false, fmt.Errorf("complete job %s in tx: %w", params.Lease.ID, err)
	}
	w := &wtx{s: s, ctx: context.WithoutCancel(ctx), tx: tx, now: s.clock()}
	ok, err := w.finishAll([]store.FinishParams{params}, nil)
	if err != nil {
		return false, fmt.Errorf("complete job %s in tx: %w", params.Lease.ID, s.dbErr(err))
	}
	s.subs.deliver(w.notes.list)
	return ok[0], nil
}

// finishAll applies validated outcomes in w, as Finish documents: ok[i]
// reports whether params[i] applied. Breaker transitions are appended to
// *breakers when it is not nil.
func (w *wtx) finishAll(params []store.FinishParams, breakers *[]store.BreakerTransition) ([]bool, error) {
	ok := make([]bool, len(params))
	ids := make([]string, len(params))
	for i := range params {
		ids[i] = hex.EncodeToString(params[i].Lease.ID[:])
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	// One read of every running job the call names; a row applies when
	// its job runs under its token, and takes the job out of the map, so
	// that a lease listed twice applies once.
	js, err := loadAll(w.query(qLoadRunning, string(list)))
	if err != nil {
		return nil, err
	}
	running := make(map[uuid.UUID]*jobRow, len(js))
	for _, j := range js {
		running[j.rec.ID] = j
	}
	done := make([]ended, 0, len(js))
	for i := range params {
		p := &params[i]
		j := running[p.Lease.ID]
		if j == nil || j.rec.LeaseToken != p.Lease.Token {
			continue
		}
		delete(running, p.Lease.ID)
		if err := w.finish(j, p, breakers); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		done = append(done, ended{j: j, result: p.Result, token: p.Lease.Token})
		ok[i] = true
	}
	// The rows are written last, in one statement: what finish inserted
	// (Then jobs, follow-ups, a batch's completion) and the batch counters
	// it moved depend on none of them.
	if err := w.saveEnded(done); err != nil {
		return nil, err
	}
	if err := w.saveFlows(); err != nil {
		return nil, err
	}
	return ok, nil
}
