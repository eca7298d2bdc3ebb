package ax

import (
	"context"
	"sync"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// maxFlushBatch caps the outcomes written by one Finish call.
const maxFlushBatch = 1000

// completion is one attempt's outcome waiting to be written.
type completion struct {
	params  store.FinishParams
	attempt *attempt
	err     error
	took    time.Duration
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
// call per flush, at most FlushInterval after the first outcome arrived.
// While the store is unreachable it retries; the jobs stay leased (the
// heartbeat keeps extending them) so nothing is rerun meanwhile.
type completer struct {
	r    *runtime
	in   chan completion
	done chan struct{}

	// closeMu lets add check closed and send atomically with respect to
	// stop, so a late handler (abandoned by Stop) cannot send on a closed
	// channel.
	closeMu sync.RWMutex
	closed  bool

	// final is cancelled when Stop's flush deadline passes.
	final       context.Context
	cancelFinal context.CancelFunc
}

func newCompleter(r *runtime) *completer {
	final, cancel := context.WithCancel(context.Background())
	return &completer{
		r:           r,
		in:          make(chan completion, r.cfg.Workers),
		done:        make(chan struct{}),
		final:       final,
		cancelFinal: cancel,
	}
}

// add queues an outcome; it blocks only while the buffer is full.
func (c *completer) add(cp completion) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed {
		c.r.log.Warn("attempt outcome after stop dropped; the job will be rescued", cp.fields()...)
		return
	}
	c.in <- cp
}

// run is the completer's goroutine.
func (c *completer) run() {
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]completion, 0, maxFlushBatch)
	for {
		first, ok := <-c.in
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		timer.Reset(c.r.cfg.FlushInterval)
		open := true
	collect:
		for len(batch) < maxFlushBatch {
			select {
			case cp, ok := <-c.in:
				if !ok {
					open = false
					break collect
				}
				batch = append(batch, cp)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		c.flush(batch)
		if !open {
			return
		}
	}
}

// flush writes a batch, retrying while the store fails, until Stop's final
// deadline.
func (c *completer) flush(batch []completion) {
	params := make([]store.FinishParams, len(batch))
	for i, cp := range batch {
		params[i] = cp.params
	}
	var ok []bool
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(c.final, claimTimeout)
		var err error
		ok, err = c.r.store.Finish(ctx, params)
		cancel()
		if err == nil {
			break
		}
		if c.final.Err() != nil {
			c.r.log.Error("outcomes not written before stop; their jobs will be rescued when leases expire",
				zap.Int("jobs", len(batch)), zap.Error(err))
			c.forget(batch)
			return
		}
		wait := min(time.Duration(1<<min(try, 10))*10*time.Millisecond, 5*time.Second)
		c.r.log.Warn("write outcomes failed; retrying", zap.Int("jobs", len(batch)), zap.Error(err), zap.Duration("retry_in", wait))
		select {
		case <-time.After(wait):
		case <-c.final.Done():
		}
	}
	c.forget(batch)
	for i, cp := range batch {
		c.r.logOutcome(cp, ok[i])
		c.r.emitOutcome(cp, ok[i])
	}
}

// forget removes written attempts from the running set.
func (c *completer) forget(batch []completion) {
	c.r.mu.Lock()
	for _, cp := range batch {
		delete(c.r.attempts, cp.attempt.job.ID)
	}
	c.r.mu.Unlock()
}

// stop flushes what is queued and stops the goroutine. Writes are retried
// until ctx is done, then for at most ReleaseTimeout more.
func (c *completer) stop(ctx context.Context) {
	c.closeMu.Lock()
	c.closed = true
	close(c.in)
	c.closeMu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		t := time.NewTimer(c.r.cfg.ReleaseTimeout)
		select {
		case <-c.done:
		case <-t.C:
			c.cancelFinal()
			<-c.done
		}
		t.Stop()
	}
	c.cancelFinal()
}

// logOutcome logs a written (or refused) outcome at its level: successes at
// debug, retries at warn, dead jobs and refusals at error.
func (r *runtime) logOutcome(cp completion, applied bool) {
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
		level, msg, extra = zap.WarnLevel, "job failed; retrying", []zap.Field{zap.Duration("retry_in", cp.params.Delay)}
	case store.OutcomeDead:
		level, msg = zap.ErrorLevel, "job dead: no attempts left or permanent error"
	case store.OutcomeSnooze:
		msg, extra = "job snoozed", []zap.Field{zap.Duration("snooze", cp.params.Delay)}
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
	e := Event{JobID: j.ID, JobKind: j.Kind, Attempt: j.Attempt, Metadata: j.Metadata, Duration: cp.took, Err: cp.err}
	emit := func(k EventKind) {
		e.Kind = k
		r.s.emit(e)
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
		emit(EventSnoozed)
	case store.OutcomeCancelled:
		emit(EventCancelled)
	}
}
