package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// Flow control (store.FlowStore). One process holds the file and every
// write is one serialized transaction, so the rules are applied in Go
// inside the transaction, as memstore applies them under its lock: a
// kind's settings, breaker and rate bucket are one row of flows, the
// partitions' buckets rows of flow_partitions; running jobs are counted
// from the counts table (per kind) and the jobs_running index (per
// partition); a sequence's first live job is read from jobs_sequence.
// Claims that flow control concerns are claimFlow's (claimflow.go);
// Finish feeds the breakers (observeBreaker); Insert derives partition
// keys and checks the pending bounds (checkPending).

// flowRow is a kind's stored flow settings and state, as a transaction
// read them (and changed them: dirty).
type flowRow struct {
	cfg        store.FlowConfig
	declaredBy string
	declaredAt time.Time
	breaker    store.BreakerStatus
	tat        time.Time // the kind's rate bucket (zero: full)
	dirty      bool      // breaker or tat changed: saveFlows writes them
}

// flowOf returns kind's flow settings and state, nil when it has none,
// read once per transaction.
func (w *wtx) flowOf(kind string) (*flowRow, error) {
	if f, ok := w.flows[kind]; ok {
		return f, nil
	}
	if w.flows == nil {
		w.flows = make(map[string]*flowRow)
	}
	var (
		cfg, by, breaker string
		at, tat          int64
	)
	err := w.queryRow(qFlowGet, kind).Scan(&cfg, &by, &at, &breaker, &tat)
	if isNoRows(err) {
		w.flows[kind] = nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read flow settings of %q: %w", kind, err)
	}
	f, err := decodeFlow(cfg, by, at, breaker, tat)
	if err != nil {
		return nil, fmt.Errorf("flow settings of %q: %w", kind, err)
	}
	w.flows[kind] = f
	return f, nil
}

func decodeFlow(cfg, by string, at int64, breaker string, tat int64) (*flowRow, error) {
	f := &flowRow{declaredBy: by, declaredAt: fromUS(at)}
	if err := json.Unmarshal([]byte(cfg), &f.cfg); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(breaker), &f.breaker); err != nil {
		return nil, err
	}
	if tat != 0 {
		f.tat = fromUS(tat)
	}
	return f, nil
}

// saveFlows writes the breakers (the kinds' and the partitions') and
// rate buckets the transaction changed.
func (w *wtx) saveFlows() error {
	if err := w.savePartBreakers(); err != nil {
		return err
	}
	for kind, f := range w.flows {
		if f == nil || !f.dirty {
			continue
		}
		b, err := json.Marshal(&f.breaker)
		if err != nil {
			return err
		}
		var tat int64
		if !f.tat.IsZero() {
			tat = toUS(f.tat)
		}
		if _, err := w.exec(qFlowState, string(b), tat, kind); err != nil {
			return fmt.Errorf("save flow state of %q: %w", kind, err)
		}
		f.dirty = false
	}
	return nil
}

// SetFlows stores each kind's flow settings in place of what was stored,
// as store.FlowStore documents: a config that sets nothing removes the
// kind's settings and state; the breaker's state is kept while the kind
// keeps a breaker, and the rate buckets while it keeps the same kind of
// rate. Subscribers of each kind are notified (a limit may have grown).
// Invalid params fail with an error wrapping store.ErrInvalidParams and
// change nothing.
func (s *Store) SetFlows(ctx context.Context, params *store.SetFlowsParams) error {
	if params == nil {
		return fmt.Errorf("set flows: %w: nil params", store.ErrInvalidParams)
	}
	if err := params.Validate(); err != nil {
		return fmt.Errorf("set flows: %w", err)
	}
	err := s.write(ctx, func(w *wtx) error {
		for i := range params.Flows {
			cfg := params.Flows[i]
			f, err := w.flowOf(cfg.Kind)
			if err != nil {
				return err
			}
			if cfg.IsZero() {
				if f != nil {
					if _, err := w.exec(qFlowDel, cfg.Kind); err != nil {
						return err
					}
					if _, err := w.exec(qFlowPartsDel, cfg.Kind); err != nil {
						return err
					}
					if err := w.dropPartBreakers(cfg.Kind); err != nil {
						return err
					}
					w.flows[cfg.Kind] = nil
					w.notify(cfg.Kind, w.now)
				}
				continue
			}
			if f == nil {
				f = &flowRow{}
			}
			if cfg.Breaker.IsZero() {
				f.breaker = store.BreakerStatus{}
			}
			if cfg.Rate.IsZero() {
				f.tat = time.Time{}
			}
			if cfg.PartitionRate.IsZero() || cfg.Partition != f.cfg.Partition {
				if _, err := w.exec(qFlowPartsDel, cfg.Kind); err != nil {
					return err
				}
			}
			if cfg.PartitionBreaker.IsZero() || cfg.Partition != f.cfg.Partition {
				if err := w.dropPartBreakers(cfg.Kind); err != nil {
					return err
				}
			}
			f.cfg, f.declaredBy, f.declaredAt = cfg, params.Node, w.now
			c, err := json.Marshal(&f.cfg)
			if err != nil {
				return err
			}
			b, err := json.Marshal(&f.breaker)
			if err != nil {
				return err
			}
			var tat int64
			if !f.tat.IsZero() {
				tat = toUS(f.tat)
			}
			if _, err := w.exec(qFlowPut, cfg.Kind, string(c), params.Node, toUS(w.now), string(b), tat); err != nil {
				return err
			}
			w.flows[cfg.Kind] = f
			w.notify(cfg.Kind, w.now)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set flows: %w", err)
	}
	return nil
}

// Flows returns the state of every kind with stored settings, ordered by
// kind; see store.FlowStore.
func (s *Store) Flows(ctx context.Context) ([]store.FlowState, error) {
	var out []store.FlowState
	err := s.read(ctx, true, func(r *rtx) error {
		out = out[:0]
		now := s.clock()
		rows, err := r.query(qFlowsAll)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				kind, cfg, by, breaker      string
				at, tat, running, openParts int64
			)
			if err := rows.Scan(&kind, &cfg, &by, &at, &breaker, &tat, &running, &openParts); err != nil {
				return err
			}
			f, err := decodeFlow(cfg, by, at, breaker, tat)
			if err != nil {
				return fmt.Errorf("flow settings of %q: %w", kind, err)
			}
			st := f.state(now)
			st.Running = running
			st.PartitionBreakersOpen = int(openParts)
			out = append(out, st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	return out, nil
}

// state returns f as a store.FlowState at now, but Running.
func (f *flowRow) state(now time.Time) store.FlowState {
	return store.NewFlowState(f.cfg, f.declaredBy, f.declaredAt, f.breaker, f.tat, 0, now)
}

// SetBreaker opens (for the kind's CoolDown) or closes the kind's breaker
// by hand; see store.FlowStore. A kind without a breaker fails with an
// error wrapping store.ErrNotFound. Closing notifies subscribers of the
// kind.
func (s *Store) SetBreaker(ctx context.Context, kind string, open bool) (*store.SetBreakerResult, error) {
	if err := store.CheckBreakerKind(kind, open); err != nil {
		return nil, err
	}
	var res *store.SetBreakerResult
	err := s.write(ctx, func(w *wtx) error {
		f, err := w.flowOf(kind)
		if err != nil {
			return err
		}
		if f == nil || f.cfg.Breaker.IsZero() {
			return fmt.Errorf("%w: the kind has no circuit breaker", store.ErrNotFound)
		}
		res = &store.SetBreakerResult{Transition: f.breaker.Set(&f.cfg.Breaker, kind, open, w.now)}
		if res.Transition != nil {
			f.dirty = true
			if !open {
				w.notify(kind, w.now)
			}
		}
		running, err := w.kindRunning(kind)
		if err != nil {
			return err
		}
		res.State = f.state(w.now)
		res.State.Running = running
		return w.saveFlows()
	})
	if err != nil {
		return nil, fmt.Errorf("set breaker: %w", err) // the caller names the kind and verb (Admin.SetBreaker)
	}
	return res, nil
}

// kindRunning returns how many jobs of kind run.
func (w *wtx) kindRunning(kind string) (int64, error) {
	var n int64
	err := w.queryRow(qKindRunning, kind).Scan(&n)
	return n, err
}

// FinishFlow is Finish, also returning the breaker transitions the
// outcomes made; see store.FlowStore.
func (s *Store) FinishFlow(ctx context.Context, params []store.FinishParams) (*store.FinishResult, error) {
	for i := range params {
		if err := params[i].Validate(); err != nil {
			return nil, fmt.Errorf("finish jobs: row %d: %w", i, err)
		}
	}
	res := &store.FinishResult{OK: make([]bool, len(params))}
	if len(params) == 0 {
		return res, s.usableErr(ctx, "finish jobs")
	}
	err := s.write(ctx, func(w *wtx) error {
		res.Breakers = nil
		ok, err := w.finishAll(params, &res.Breakers)
		if err == nil {
			copy(res.OK, ok)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return res, nil
}

// observeBreaker feeds the breaker of the kind of a job whose attempt
// ended with out, and returns the transition it made, if any.
func (w *wtx) observeBreaker(kind string, out store.Outcome) (*store.BreakerTransition, error) {
	f, err := w.flowOf(kind)
	if err != nil || f == nil || f.cfg.Breaker.IsZero() {
		return nil, err
	}
	var t *store.BreakerTransition
	switch out {
	case store.OutcomeSucceeded:
		t = f.breaker.Observe(&f.cfg.Breaker, kind, false, w.now)
	case store.OutcomeRetry, store.OutcomeDead:
		t = f.breaker.Observe(&f.cfg.Breaker, kind, true, w.now)
	default:
		return nil, nil
	}
	f.dirty = true
	return t, nil
}

// observeBreakers feeds the outcome out of j's attempt to the breakers
// of its kind and of its partition, appending the transitions to
// breakers (nil: not reported).
func (w *wtx) observeBreakers(j *jobRow, out store.Outcome, breakers *[]store.BreakerTransition) error {
	for _, observe := range []func() (*store.BreakerTransition, error){
		func() (*store.BreakerTransition, error) { return w.observeBreaker(j.rec.Kind, out) },
		func() (*store.BreakerTransition, error) {
			return w.observePartBreaker(j.rec.Kind, j.rec.PartitionKey, out)
		},
	} {
		t, err := observe()
		if err != nil {
			return err
		}
		if t != nil && breakers != nil {
			*breakers = append(*breakers, *t)
		}
	}
	return nil
}

// leftRunning notifies subscribers of kind when a job of it left running
// and that may let another start: the kind has a concurrency limit or a
// breaker, or the job is one of a sequence.
func (w *wtx) leftRunning(j *jobRow) error {
	if j.rec.SequenceKey != "" {
		w.notify(j.rec.Kind, w.now)
		return nil
	}
	f, err := w.flowOf(j.rec.Kind)
	if err != nil {
		return err
	}
	if f != nil && f.cfg.Limits() {
		w.notify(j.rec.Kind, w.now)
	}
	return nil
}

// partitionKey derives the partition key of a job to insert from its
// kind's stored partition source.
func (w *wtx) partitionKey(p *store.InsertParams) (string, error) {
	f, err := w.flowOf(p.Kind)
	if err != nil || f == nil || f.cfg.Partition.IsZero() {
		return "", err
	}
	return store.PartitionKeyOf(f.cfg.Partition, p.Metadata, p.Payload)
}

// checkPending refuses an insert that would take the pending jobs of a
// kind past its MaxPending, or of all kinds past a row's PendingLimit,
// counting every row of the call (duplicates too), with a
// *store.PendingLimitError. The counts come from the counts table.
func (w *wtx) checkPending(params []store.InsertParams) error {
	var rows map[string]int
	limit := 0
	for i := range params {
		p := &params[i]
		if p.PendingLimit > 0 && (limit == 0 || p.PendingLimit < limit) {
			limit = p.PendingLimit
		}
		f, err := w.flowOf(p.Kind)
		if err != nil {
			return err
		}
		if f != nil && f.cfg.MaxPending > 0 {
			if rows == nil {
				rows = make(map[string]int)
			}
			rows[p.Kind]++
		}
	}
	for kind, n := range rows {
		maxPending := w.flows[kind].cfg.MaxPending
		var pending int64
		if err := w.queryRow(qKindPending, kind).Scan(&pending); err != nil {
			return err
		}
		if pending+int64(n) > int64(maxPending) {
			return &store.PendingLimitError{Kind: kind, Pending: int(min(pending, int64(maxPending))), Limit: maxPending}
		}
	}
	if limit > 0 {
		var pending int64
		if err := w.queryRow(qAllPending).Scan(&pending); err != nil {
			return err
		}
		if pending+int64(len(params)) > int64(limit) {
			return &store.PendingLimitError{Pending: int(min(pending, int64(limit))), Limit: limit}
		}
	}
	return nil
}
