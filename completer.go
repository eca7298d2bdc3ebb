package ax

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// maxFlushBatch caps the outcomes written by one Finish call.
const maxFlushBatch = 1000

// flushConcurrency is how many Finish calls a host has in flight at most.
// With one, a slow Finish (a store under a held snapshot: 100 ms for 100
// outcomes) capped completion at Workers outcomes per Finish latency,
// since workers wait for room in the queue; a second call overlaps the
// first's round trip and server time. Batches hold disjoint jobs, so the
// calls do not wait for each other's row locks.
const flushConcurrency = 2

// completion is one attempt's outcome waiting to be written.
type completion struct {
	params  store.FinishParams
	attempt *attempt
	err     error
	took    time.Duration
	// inTx: the handler called CompleteTx. The outcome written after it
	// applies only if the handler's transaction did not commit; refused,
	// it means the transaction ended the job, successfully.
	inTx bool
	// breakerHeld: a failure the kind's breaker counts, whose kind's
	// claims wait until it is written (breaker.go).
	breakerHeld bool
}

// fields returns the log fields of the attempt, built only when a line is
// actually written: successes at 100k jobs/s would otherwise allocate them
// for a debug line nobody reads.
func (cp completion) fields(extra ...zap.Field) []zap.Field {
	f := append(jobFields(cp.attempt.job), zap.Float64(fieldDurationMS, ms(cp.took)))
	if cp.err != nil {
		f = append(f, zap.NamedError(fieldError, cp.err))
	}
	return append(f, extra...)
}

// completer buffers attempt outcomes and writes them in batches: one store
// call per flush, at most FlushInterval after the first outcome arrived,
// at most flushConcurrency flushes at once.
//
// A failing write is told apart by its error. A transient failure (store
// unreachable, timeout) is retried with backoff: the jobs stay leased (the
// heartbeat keeps extending them) so nothing is rerun meanwhile. A refusal
// (store.ErrInvalidParams: a row the store cannot keep) is never retried
// as is: the batch is split in halves until the refused row stands alone,
// so every other outcome is written, and the refused one is discarded, its
// attempt dropped from the heartbeat so the job is rescued and retried once
// its lease expires. Outcomes are cleaned before they get here (see
// runtime.outcome), so a refusal means a store with stricter limits than
// the contract's.
//
// The queue is bounded (outcomeQueueCapacity: Config.Workers, at least
// maxAheadClaim, the most jobs a host taking ahead holds, plus the batches
// being written; a smaller queue cut the finishes of a host taking 300
// ahead to batches of 88 and blocked its workers): add blocks while it is full, which holds a worker slot, so the
// claimer takes no more jobs while the store is slow to take outcomes. Stop closes the queue (blocked adds
// return at once, their outcomes counted as not written), writes what is
// queued until its deadline plus ReleaseTimeout, and reports what it could
// not write.
type completer struct {
	r        *runtime
	capacity int
	done     chan struct{}

	mu      sync.Mutex
	queue   []completion
	closed  bool
	ready   chan struct{} // capacity 1: the queue went from empty to non-empty, or closed
	hasRoom *sync.Cond    // signalled when the queue shrinks or closes
	lost    int           // outcomes not written: refused, dropped at close, or cut by Stop's deadline
	urgent  bool          // a queued outcome holds its kind's claims: write without gathering

	// final ends when Stop's grace deadline passes: the last writes give
	// up then.
	final       context.Context
	cancelFinal context.CancelFunc
}

// outcomeQueueCapacity returns how many outcomes a host of workers queues
// before add blocks (see completer).
func outcomeQueueCapacity(workers int) int { return max(workers, maxAheadClaim) }

func newCompleter(r *runtime) *completer {
	c := &completer{
		r:        r,
		capacity: outcomeQueueCapacity(r.cfg.Workers),
		done:     make(chan struct{}),
		ready:    make(chan struct{}, 1),
	}
	c.hasRoom = sync.NewCond(&c.mu)
	c.final, c.cancelFinal = context.WithCancel(context.Background())
	return c
}

// add queues an outcome, blocking while the queue is full. It reports
// false, and the outcome is not written, once Stop closed the queue.
func (c *completer) add(cp completion) bool {
	// Counted before the caller frees its slot, so that the claim the
	// freed slot triggers leaves the kind out.
	cp.breakerHeld = c.r.holdForBreaker(&cp)
	c.mu.Lock()
	for len(c.queue) >= c.capacity && !c.closed {
		c.hasRoom.Wait()
	}
	if c.closed {
		c.lost++
		c.mu.Unlock()
		c.r.discard(cp.attempt)
		c.r.releaseHolds([]completion{cp})
		c.r.log.Warn("attempt outcome after stop dropped; the job runs again once its lease expires", cp.fields()...)
		return false
	}
	c.queue = append(c.queue, cp)
	n := len(c.queue)
	c.urgent = c.urgent || cp.breakerHeld
	c.mu.Unlock()
	if n == 1 || n == maxFlushBatch || cp.breakerHeld {
		c.signal()
	}
	return true
}

// mayGather reports whether the queue may gather outcomes before it is
// written: not while one of them holds its kind's claims.
func (c *completer) mayGather() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.urgent
}

func (c *completer) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// take removes and returns up to maxFlushBatch queued outcomes (in batch's
// storage, or a new slice when batch is nil), and whether the queue is
// closed.
func (c *completer) take(batch []completion) ([]completion, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.queue), maxFlushBatch)
	batch = append(batch[:0], c.queue[:n]...)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	if n > 0 {
		c.hasRoom.Broadcast()
	}
	if len(c.queue) == 0 {
		c.urgent = false
	}
	return batch, c.closed
}

// run is the completer's goroutine: it waits for a first outcome, lets
// others gather for FlushInterval (less when a full batch is queued or
// Stop began), and writes everything queued, each batch on a goroutine of
// its own once one of the flushConcurrency slots is free. So while a
// write is in flight, the next outcomes gather and go out beside it. Once
// the queue is closed and drained, it waits for the writes in flight.
func (c *completer) run() {
	defer close(c.done)
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	defer gather.Stop()
	var writing sync.WaitGroup
	defer writing.Wait()
	slots := make(chan struct{}, flushConcurrency)
	for {
		<-c.ready
		if c.mayGather() {
			gather.Reset(c.r.cfg.FlushInterval)
			select {
			case <-gather.C:
			case <-c.ready: // a full batch is queued, a failure holds its kind's claims, or Stop began
				gather.Stop()
			}
		}
		for {
			slots <- struct{}{}
			batch, closed := c.take(nil)
			if len(batch) == 0 {
				<-slots
				if closed {
					return
				}
				break
			}
			writing.Go(func() {
				defer func() { <-slots }()
				c.flush(batch)
			})
		}
	}
}

// flush writes a batch: retrying transient failures until Stop's final
// deadline, splitting refused batches to isolate the refused rows.
func (c *completer) flush(batch []completion) {
	params := make([]store.FinishParams, len(batch))
	for i, cp := range batch {
		params[i] = cp.params
	}
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(c.final, claimTimeout)
		ok, breakers, err := c.finish(ctx, params)
		cancel()
		switch {
		case err == nil:
			c.written(batch, ok)
			for _, t := range breakers {
				c.r.s.breakerChanged(t)
			}
			return
		case errors.Is(err, store.ErrInvalidParams) && len(batch) > 1:
			half := len(batch) / 2
			c.flush(batch[:half])
			c.flush(batch[half:])
			return
		case errors.Is(err, store.ErrInvalidParams):
			c.r.log.Error("attempt outcome refused by the store; the job runs again once its lease expires",
				batch[0].fields(zap.NamedError("store_error", err))...)
			c.notWritten(batch)
			return
		case c.final.Err() != nil:
			c.r.log.Error("outcomes not written before stop; their jobs run again once their leases expire",
				zap.Int("jobs", len(batch)), zap.Error(err))
			c.notWritten(batch)
			return
		}
		wait := min(time.Duration(1<<min(try, 10))*10*time.Millisecond, 5*time.Second)
		c.r.log.Warn("write outcomes failed; retrying", zap.Int("jobs", len(batch)), zap.Error(err), zap.Float64("retry_in_ms", ms(wait)))
		select {
		case <-time.After(wait):
		case <-c.final.Done():
		}
	}
}

// finish writes params, through FinishFlow with a FlowStore so that the
// breaker transitions they make are reported here.
func (c *completer) finish(ctx context.Context, params []store.FinishParams) ([]bool, []store.BreakerTransition, error) {
	if c.r.flow == nil {
		ok, err := c.r.store.Finish(ctx, params)
		return ok, nil, err
	}
	res, err := c.r.flow.FinishFlow(ctx, params)
	if err != nil {
		return nil, nil, err
	}
	return res.OK, res.Breakers, nil
}

// written ends the attempts of a written batch and reports each outcome.
func (c *completer) written(batch []completion, ok []bool) {
	r := c.r
	r.mu.Lock()
	wake := false
	for i := range batch {
		r.unregister(batch[i].attempt)
		wake = r.releaseBreakerHold(&batch[i]) || wake
	}
	r.mu.Unlock()
	if wake {
		r.wake()
	}
	for i, cp := range batch {
		r.logOutcome(cp, ok[i])
		r.emitOutcome(cp, ok[i])
	}
}

// notWritten discards the attempts of outcomes the store did not take and
// counts them for Stop.
func (c *completer) notWritten(batch []completion) {
	c.mu.Lock()
	c.lost += len(batch)
	c.mu.Unlock()
	for _, cp := range batch {
		c.r.discard(cp.attempt)
	}
	c.r.releaseHolds(batch)
}

// stop closes the queue and waits for the goroutine to write what is
// queued: retrying failures until ctx ends, then until grace ends (the
// grace deadline, when ctx's own passed). It returns how many outcomes were
// not written.
func (c *completer) stop(ctx, grace context.Context) int {
	c.mu.Lock()
	c.closed = true
	c.hasRoom.Broadcast()
	c.mu.Unlock()
	c.signal()
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done:
		case <-grace.Done():
		}
	}
	c.cancelFinal()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// logOutcome logs a written (or refused) outcome at its level: successes at
// debug, retries at warn, dead jobs and refusals at error.
func (r *runtime) logOutcome(cp completion, applied bool) {
	if cp.inTx && !applied {
		if ce := r.log.Check(zap.DebugLevel, "job succeeded in its handler's transaction"); ce != nil {
			ce.Write(cp.fields()...)
		}
		return
	}
	if !applied {
		r.log.Error("attempt result refused: lease no longer held (job rescued or taken over)", cp.fields()...)
		return
	}
	var (
		level = zap.DebugLevel
		msg   string
		extra []zap.Field
	)
	switch cp.params.Outcome {
	case store.OutcomeSucceeded:
		msg = "job succeeded"
	case store.OutcomeRetry:
		level, msg, extra = zap.WarnLevel, "job failed; retrying", []zap.Field{zap.Float64(fieldRetryInMS, ms(cp.params.Delay))}
	case store.OutcomeDead:
		level, msg = zap.ErrorLevel, "job dead: no attempts left or permanent error"
	case store.OutcomeSnooze:
		msg, extra = "job snoozed", []zap.Field{zap.Float64(fieldDelayMS, ms(cp.params.Delay))}
		if keyWait(cp.err) {
			level, msg = zap.WarnLevel, "job left for a host that can open it: this host cannot open its sealed values (key not in the ring, or a newer envelope format)"
		}
	case store.OutcomeCancelled:
		msg = "job cancelled while running"
	default:
		return
	}
	if ce := r.log.Check(level, msg); ce != nil {
		ce.Write(cp.fields(extra...)...)
	}
}

// emitOutcome sends the events of a written (or refused) outcome.
func (r *runtime) emitOutcome(cp completion, applied bool) {
	j := cp.attempt.job
	e := Event{JobID: j.ID, JobKind: j.Kind, Attempt: j.Attempt, Metadata: j.Metadata, Batch: j.Batch, Duration: cp.took, Err: cp.err}
	emit := func(k EventKind) {
		e.Kind = k
		r.s.emit(e)
	}
	if cp.inTx && !applied {
		emit(EventSucceeded) // the handler's transaction ended the job
		return
	}
	if !applied {
		emit(EventLeaseLost)
		return
	}
	switch cp.params.Outcome {
	case store.OutcomeSucceeded:
		emit(EventSucceeded)
	case store.OutcomeRetry:
		emit(EventFailed)
		e.Delay = cp.params.Delay
		emit(EventRetried)
	case store.OutcomeDead:
		emit(EventFailed)
		emit(EventDead)
	case store.OutcomeSnooze:
		e.Delay = cp.params.Delay
		if keyWait(cp.err) {
			emit(EventKeyMissing)
		}
		emit(EventSnoozed)
	case store.OutcomeCancelled:
		emit(EventCancelled)
	}
}
