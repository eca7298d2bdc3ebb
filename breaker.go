package ax

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/axsched/ax/store"
	"go.uber.org/zap"
)

// BreakerConfig configures a kind's circuit breaker (CircuitBreaker). The
// zero value of each field means its documented default.
//
// The breaker is cluster-wide: its state lives in the store, every host's
// outcomes feed it, and no host starts a job of the kind while it is open.
//
//	closed ──Failures in a row, or FailureRatio over a Window──▶ open
//	open ──CoolDown passed──▶ half-open: one probe job starts
//	half-open ──the probe succeeds──▶ closed
//	half-open ──the probe fails──▶ open again, for twice the last cool-down (at most MaxCoolDown)
//
// Failures: n means that attempt n+1 does not start: no job of the kind
// starts once the store counted the nth failure in a row, and a host
// writes a failure of a kind with a breaker at once and leaves the kind
// out of its claims until it is written, so with one job at a time exactly
// n attempts run. Attempts already running when the threshold is reached
// (several at a time, or on other hosts) may still fail: the open breaker
// ignores them, so they add failed attempts but do not extend the
// opening. On PostgreSQL an outcome written by CompleteTx is counted when
// the first claim or finish of the kind after the caller's commit folds
// it in (so that claims never wait for the caller's transaction).
//
// While it is open, jobs of the kind wait as they are: no attempt is used
// and none goes dead for it. A failed attempt is one that returns an
// error (retried or dead, timeouts and panics included); snoozes,
// cancellations, hand-backs at Stop and rescued leases do not count. An
// operator opens or closes it by hand with Admin.OpenBreaker and
// Admin.CloseBreaker.
type BreakerConfig struct {
	// Failures opens the breaker after this many failed attempts in a
	// row. Defaults to 5 when FailureRatio is zero too; otherwise 0 (not
	// by count).
	Failures int
	// FailureRatio, in (0, 1], opens the breaker when that fraction of
	// the attempts that ended within a Window failed (0: not by ratio).
	FailureRatio float64
	// Window is the length of the ratio's windows (tumbling windows, each
	// starting with the first attempt after the previous one). Defaults
	// to 1 minute with a FailureRatio.
	Window time.Duration
	// MinAttempts is how many attempts a window needs before its ratio
	// counts. Defaults to 20 with a FailureRatio.
	MinAttempts int
	// CoolDown is how long the breaker stays open before a probe.
	// Defaults to 30s.
	CoolDown time.Duration
	// MaxCoolDown caps the cool-down, which doubles with every failed
	// probe. Defaults to 10 minutes, or CoolDown when that is longer.
	MaxCoolDown time.Duration
}

// Defaults of BreakerConfig.
const (
	DefaultBreakerFailures    = 5
	DefaultBreakerWindow      = time.Minute
	DefaultBreakerMinAttempts = 20
	DefaultBreakerCoolDown    = 30 * time.Second
	DefaultBreakerMaxCoolDown = 10 * time.Minute
)

// storeConfig returns c with its defaults as the store keeps it, or an
// error wrapping ErrInvalidOption naming the option (CircuitBreaker,
// PartitionBreaker).
func (c BreakerConfig) storeConfig(option string) (store.BreakerConfig, error) {
	switch {
	case c.Failures < 0 || c.MinAttempts < 0 || c.Window < 0 || c.CoolDown < 0 || c.MaxCoolDown < 0:
		return store.BreakerConfig{}, fmt.Errorf("%w: %s: negative value in %+v", ErrInvalidOption, option, c)
	case math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1:
		return store.BreakerConfig{}, fmt.Errorf("%w: %s: FailureRatio %v not in [0, 1]", ErrInvalidOption, option, c.FailureRatio)
	case c.FailureRatio == 0 && (c.Window != 0 || c.MinAttempts != 0):
		return store.BreakerConfig{}, fmt.Errorf("%w: %s: Window and MinAttempts need a FailureRatio", ErrInvalidOption, option)
	}
	if c.Failures == 0 && c.FailureRatio == 0 {
		c.Failures = DefaultBreakerFailures
	}
	if c.FailureRatio > 0 {
		setDefault(&c.Window, DefaultBreakerWindow)
		setDefault(&c.MinAttempts, DefaultBreakerMinAttempts)
	}
	setDefault(&c.CoolDown, DefaultBreakerCoolDown)
	setDefault(&c.MaxCoolDown, max(DefaultBreakerMaxCoolDown, c.CoolDown))
	sc := store.BreakerConfig{
		Failures: c.Failures, FailureRatio: c.FailureRatio, Window: c.Window, MinAttempts: c.MinAttempts,
		CoolDown: c.CoolDown, MaxCoolDown: c.MaxCoolDown,
	}
	if err := sc.Validate(); err != nil {
		return store.BreakerConfig{}, fmt.Errorf("%w: %s: %s", ErrInvalidOption, option, unwrapParams(err))
	}
	return sc, nil
}

// CircuitBreaker gives the kind a cluster-wide circuit breaker (see
// BreakerConfig). Transitions are events (EventBreakerOpened,
// EventBreakerHalfOpen, EventBreakerClosed, each emitted once, by the host
// whose store call made it) and log lines; the state is in Stats.Flows,
// Admin.Flows, axprom's ax_breaker_state and `ax kinds list`. A config
// out of range is an error wrapping ErrInvalidOption.
func CircuitBreaker(c BreakerConfig) HandlerOption {
	return handlerOptionFunc(func(h *handlerSettings) error {
		sc, err := c.storeConfig("CircuitBreaker")
		if err != nil {
			return err
		}
		h.flow.Breaker, h.flowSet = sc, true
		return nil
	})
}

// BreakerState is where a kind's circuit breaker is: closed, open or
// half_open (see BreakerConfig).
type BreakerState = store.BreakerState

// Breaker states.
const (
	BreakerClosed   = store.BreakerClosed
	BreakerOpen     = store.BreakerOpen
	BreakerHalfOpen = store.BreakerHalfOpen
)

// OpenBreaker opens kind's circuit breaker by hand, across the cluster: no
// job of the kind starts until its cool-down has passed, then a probe runs
// as after any opening (CloseBreaker ends it sooner). It returns the
// kind's flow state afterwards. Errors: ErrInvalidKind, ErrNotFound (the
// kind has no breaker: no running host declared CircuitBreaker for it),
// errors.ErrUnsupported (the store has no flow control), or the store's
// error.
func (a *Admin) OpenBreaker(ctx context.Context, kind string) (*FlowState, error) {
	return a.setBreaker(ctx, kind, true)
}

// CloseBreaker closes kind's circuit breaker by hand: its jobs start again
// at once on every host (the store notifies them). Errors are as for
// OpenBreaker.
func (a *Admin) CloseBreaker(ctx context.Context, kind string) (*FlowState, error) {
	return a.setBreaker(ctx, kind, false)
}

func (a *Admin) setBreaker(ctx context.Context, kind string, open bool) (*FlowState, error) {
	verb := "close"
	if open {
		verb = "open"
	}
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("%s breaker: %w", verb, err)
	}
	if err := checkKind(kind); err != nil {
		return nil, fmt.Errorf("%s breaker: %w", verb, err)
	}
	fs, err := flowStoreOf(a.store)
	if err != nil {
		return nil, fmt.Errorf("%s breaker: %w", verb, err)
	}
	res, err := fs.SetBreaker(ctx, kind, open)
	if err != nil {
		return nil, fmt.Errorf("%s breaker of %q: %w", verb, kind, err)
	}
	a.audit("breaker "+verb+"ed by hand", zap.String(fieldKind, kind), zap.Bool("changed", res.Transition != nil))
	if a.sched != nil && res.Transition != nil {
		a.sched.breakerChanged(*res.Transition)
	}
	if r := a.runtime(); r != nil && !open {
		r.wake()
	}
	return &res.State, nil
}

// breakerChanged logs a breaker transition a store call of this host
// made, and emits its event.
func (s *Scheduler) breakerChanged(t store.BreakerTransition) {
	kind := EventBreakerClosed
	switch t.To {
	case store.BreakerOpen:
		kind = EventBreakerOpened
	case store.BreakerHalfOpen:
		kind = EventBreakerHalfOpen
	}
	fields := []zap.Field{zap.String(fieldKind, t.Kind), zap.String("from", string(t.From)), zap.String("reason", t.Reason)}
	what := "the kind"
	if t.Partitioned {
		fields = append(fields, zap.String("partition_key", t.PartitionKey))
		what = "the partition"
	}
	switch kind {
	case EventBreakerOpened:
		s.log.Warn("circuit breaker opened: no job of "+what+" starts until its cool-down ends",
			append(fields, zap.Float64("cool_down_ms", ms(t.CoolDown)))...)
	case EventBreakerHalfOpen:
		s.log.Info("circuit breaker half-open: one probe job of "+what+" starts", fields...)
	default:
		s.log.Info("circuit breaker closed", fields...)
	}
	s.emit(Event{Kind: kind, JobKind: t.Kind, Reason: t.Reason, Delay: t.CoolDown,
		Partitioned: t.Partitioned, PartitionKey: t.PartitionKey})
}

// A host holds back the claims of a kind with a breaker while a failed
// attempt of the kind, which the breaker counts, is queued and not yet
// written: otherwise the slot it freed is claimed again before the store
// counted the failure, and with Failures: 3 a kind running one job at a
// time started 4 to 7 attempts before the breaker opened. The outcome is
// then written at once, without waiting for FlushInterval. Successes,
// snoozes and the like are not held: none of them can open a breaker.

// holdForBreaker counts cp's outcome in breakerHeld, and reports true,
// when it is a failure that the breaker of its kind counts.
func (r *runtime) holdForBreaker(cp *completion) bool {
	if f := &cp.attempt.kind.settings.flow; r.flow == nil || (f.Breaker.IsZero() && f.PartitionBreaker.IsZero()) {
		return false
	}
	if o := cp.params.Outcome; o != store.OutcomeRetry && o != store.OutcomeDead {
		return false
	}
	r.mu.Lock()
	if r.breakerHeld == nil {
		r.breakerHeld = make(map[string]int)
	}
	r.breakerHeld[cp.attempt.job.Kind]++
	r.mu.Unlock()
	return true
}

// releaseBreakerHold ends the hold of an outcome holdForBreaker counted,
// once it is written (or will never be), and reports whether that was
// the kind's last, when the claimer must be woken. Called with r.mu held.
func (r *runtime) releaseBreakerHold(cp *completion) bool {
	if !cp.breakerHeld {
		return false
	}
	kind := cp.attempt.job.Kind
	r.breakerHeld[kind]--
	if r.breakerHeld[kind] > 0 {
		return false
	}
	delete(r.breakerHeld, kind)
	return true
}

// releaseHolds ends the holds of outcomes that will not be written
// (refused, or dropped at Stop) and wakes the claimer if one was a
// kind's last.
func (r *runtime) releaseHolds(batch []completion) {
	r.mu.Lock()
	wake := false
	for i := range batch {
		wake = r.releaseBreakerHold(&batch[i]) || wake
	}
	r.mu.Unlock()
	if wake {
		r.wake()
	}
}
