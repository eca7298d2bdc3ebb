// Package axalert evaluates alert rules per job kind in process: a kind
// failing N times in a row, a success rate under a bound over a window, a
// start-lag p99 over a bound. Each rule fires once per breach and once
// when it resolves, so a dead downstream failing a thousand jobs makes one
// alert, not a thousand. An Alerter is an ax.Observer; add it to
// ax.Config.Observers.
package axalert

import (
	"fmt"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// Rule names a rule of an Alerter.
type Rule int

// The rules an Alerter evaluates, each per job kind.
const (
	// RuleConsecutiveFailures fires when a kind's attempts failed
	// Config.ConsecutiveFailures times in a row, and resolves at its
	// next success.
	RuleConsecutiveFailures Rule = iota + 1
	// RuleSuccessRate fires when fewer than Config.SuccessRate of a
	// kind's finished attempts in the window succeeded, over at least
	// Config.MinSamples attempts, and resolves when the rate is back
	// at or above it (over at least MinSamples attempts).
	RuleSuccessRate
	// RuleStartLag fires when the p99 start lag of a kind's attempts
	// started in the window is above Config.StartLagP99, over at
	// least Config.MinSamples starts, and resolves when it is back at
	// or below (over at least MinSamples starts).
	RuleStartLag
)

var ruleNames = map[Rule]string{
	RuleConsecutiveFailures: "consecutive_failures",
	RuleSuccessRate:         "success_rate",
	RuleStartLag:            "start_lag_p99",
}

// String returns the rule's snake_case name ("success_rate").
func (r Rule) String() string {
	if n, ok := ruleNames[r]; ok {
		return n
	}
	return "unknown"
}

// Alert is a rule starting to fire for a kind, or resolving.
type Alert struct {
	Rule Rule
	// Kind is the job kind the rule fired for.
	Kind string
	// Resolved is false when the rule starts firing, true when it stops.
	Resolved bool
	// At is the time of the transition: the time of the event that
	// caused it (see Config.Clock).
	At time.Time
	// Value is what the rule measured: the number of consecutive
	// failures (RuleConsecutiveFailures; when resolved, the length of the
	// run a success ended), the success rate in [0, 1]
	// (RuleSuccessRate), or the fraction in [0, 1] of starts later than
	// the bound (RuleStartLag: p99 is above the bound exactly when more
	// than 1% are).
	Value float64
	// Samples is the number of attempts the rate or fraction is over
	// (zero for RuleConsecutiveFailures).
	Samples int
	// Err is the kind's latest attempt error, if any.
	Err error
	// Message describes the alert for humans.
	Message string
}

// Config configures an Alerter. The zero value of every field means
// its documented default; a negative threshold turns its rule off.
type Config struct {
	// ConsecutiveFailures is the number of failed attempts in a row that
	// fires RuleConsecutiveFailures. Defaults to 3.
	ConsecutiveFailures int
	// SuccessRate is the fraction of attempts, in (0, 1], under which
	// RuleSuccessRate fires. Defaults to 0.9.
	SuccessRate float64
	// StartLagP99 is the p99 start lag above which RuleStartLag fires.
	// Defaults to 10s.
	StartLagP99 time.Duration
	// Window is the sliding window of RuleSuccessRate and RuleStartLag.
	// Defaults to 5 minutes. It advances in steps of Window/30.
	Window time.Duration
	// MinSamples is the fewest attempts in the window for which
	// RuleSuccessRate and RuleStartLag decide anything. Defaults to 20.
	MinSamples int
	// MinInterval is the least time between two firings of one rule for
	// one kind: a rule that resolves and breaches again sooner fires again
	// only once MinInterval has passed (if still breached then). Defaults
	// to 5 minutes.
	MinInterval time.Duration
	// Clock, when set, gives the time rules are evaluated at, for tests.
	// By default an event is evaluated at its own time, ax.Event.At (the
	// Scheduler's ax.Config.Clock), or time.Now when that is zero.
	Clock func() time.Time
}

// Defaults of Config.
const (
	DefaultConsecutiveFailures = 3
	DefaultSuccessRate         = 0.9
	DefaultStartLagP99         = 10 * time.Second
	DefaultWindow              = 5 * time.Minute
	DefaultMinSamples          = 20
	DefaultMinInterval         = 5 * time.Minute
)

// alertBuckets is the number of steps of a sliding window.
const alertBuckets = 30

// Alerter is an ax.Observer evaluating alert rules per job kind, in process,
// and calling a function when a rule starts firing and when it resolves.
// Each rule fires once per breach, however many events keep it breached,
// so a dead downstream failing a thousand jobs makes one alert:
//
//	al := axalert.New(axalert.Config{}, func(a axalert.Alert) { pager.Send(a.Message) })
//	s, err := ax.New(ax.Config{Store: st, Observers: []ax.Observer{al}})
//
// Rules are evaluated as events arrive, with no goroutine of its own: a
// kind with no more events keeps its rules as they are. It sees what its
// Scheduler's observers see, so dropped events (ax.Scheduler.DroppedEvents)
// are missed. Its memory is a few counters per kind. It is safe for
// concurrent use.
type Alerter struct {
	cfg Config
	fn  func(Alert)

	mu    sync.Mutex
	kinds map[string]*kindAlerts
}

// kindAlerts is an Alerter's state for one kind.
type kindAlerts struct {
	consecutive int // failed attempts in a row
	endedRun    int // the run of failures the latest success ended
	lastErr     error
	outcomes    slidingCounts // a: succeeded, b: failed
	starts      slidingCounts // a: started, b: started later than the bound
	rules       [RuleStartLag + 1]ruleState
}

// ruleState is one rule's firing state for one kind.
type ruleState struct {
	firing    bool
	fired     bool // has fired at least once
	lastFired time.Time
}

// New returns an Alerter with cfg's rules calling fn on every
// firing and resolution. fn is called on the observers' goroutine, outside
// the Alerter's lock; it should hand slow work (a pager call) to another
// goroutine, since it delays the other observers meanwhile.
func New(cfg Config, fn func(Alert)) *Alerter {
	setDefault(&cfg.ConsecutiveFailures, DefaultConsecutiveFailures)
	setDefault(&cfg.SuccessRate, DefaultSuccessRate)
	setDefault(&cfg.StartLagP99, DefaultStartLagP99)
	setDefault(&cfg.MinSamples, DefaultMinSamples)
	setDefault(&cfg.MinInterval, DefaultMinInterval)
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if fn == nil {
		fn = func(Alert) {}
	}
	return &Alerter{cfg: cfg, fn: fn, kinds: make(map[string]*kindAlerts)}
}

// Observe evaluates the rules that e concerns and calls the Alerter's
// function for each rule that starts firing or resolves.
func (a *Alerter) Observe(e ax.Event) {
	if e.JobKind == "" {
		return
	}
	var fire []Alert
	now := e.At
	if a.cfg.Clock != nil {
		now = a.cfg.Clock()
	} else if now.IsZero() {
		now = time.Now()
	}
	a.mu.Lock()
	k := a.kinds[e.JobKind]
	if k == nil {
		width := max(a.cfg.Window/alertBuckets, 1)
		k = &kindAlerts{outcomes: newSlidingCounts(width), starts: newSlidingCounts(width)}
		a.kinds[e.JobKind] = k
	}
	switch e.Kind {
	case ax.EventStarted:
		over := int64(0)
		if e.StartLag > a.cfg.StartLagP99 {
			over = 1
		}
		k.starts.add(now, 1, over)
		fire = a.evalStartLag(fire, e.JobKind, k, now)
	case ax.EventSucceeded:
		k.endedRun, k.consecutive = k.consecutive, 0
		k.outcomes.add(now, 1, 0)
		fire = a.evalFailures(fire, e.JobKind, k, now)
		fire = a.evalSuccessRate(fire, e.JobKind, k, now)
	case ax.EventFailed:
		k.consecutive++
		k.lastErr = e.Err
		k.outcomes.add(now, 0, 1)
		fire = a.evalFailures(fire, e.JobKind, k, now)
		fire = a.evalSuccessRate(fire, e.JobKind, k, now)
	}
	a.mu.Unlock()
	for _, al := range fire {
		a.fn(al)
	}
}

// verdict is a rule's reading: breached, healthy, or not enough data.
type verdict int

const (
	unknown verdict = iota
	breached
	healthy
)

func (a *Alerter) evalFailures(fire []Alert, kind string, k *kindAlerts, now time.Time) []Alert {
	n := a.cfg.ConsecutiveFailures
	if n < 0 {
		return fire
	}
	v := healthy
	if k.consecutive >= n {
		v = breached
	}
	changed, resolved := a.transition(&k.rules[RuleConsecutiveFailures], v, now)
	if !changed {
		return fire
	}
	al := Alert{Rule: RuleConsecutiveFailures, Kind: kind, Resolved: resolved, At: now, Value: float64(k.consecutive), Err: k.lastErr}
	if resolved {
		al.Value = float64(k.endedRun)
		al.Message = fmt.Sprintf("resolved: ax: kind %q succeeded again after %d failures in a row", kind, k.endedRun)
	} else {
		al.Message = fmt.Sprintf("ax: kind %q failed %d times in a row (threshold %d); last error: %v", kind, k.consecutive, n, k.lastErr)
	}
	return append(fire, al)
}

func (a *Alerter) evalSuccessRate(fire []Alert, kind string, k *kindAlerts, now time.Time) []Alert {
	if a.cfg.SuccessRate < 0 {
		return fire
	}
	ok, failed := k.outcomes.sum(now)
	total := ok + failed
	if total == 0 || total < int64(a.cfg.MinSamples) {
		return fire
	}
	rate := float64(ok) / float64(total)
	v := healthy
	if rate < a.cfg.SuccessRate {
		v = breached
	}
	changed, resolved := a.transition(&k.rules[RuleSuccessRate], v, now)
	if !changed {
		return fire
	}
	return append(fire, Alert{
		Rule: RuleSuccessRate, Kind: kind, Resolved: resolved, At: now, Value: rate, Samples: int(total), Err: k.lastErr,
		Message: resolvedPrefix(resolved) + fmt.Sprintf("ax: kind %q success rate %.1f%% over %d attempts in the last %s (threshold %.1f%%)",
			kind, 100*rate, total, a.cfg.Window, 100*a.cfg.SuccessRate),
	})
}

func (a *Alerter) evalStartLag(fire []Alert, kind string, k *kindAlerts, now time.Time) []Alert {
	if a.cfg.StartLagP99 < 0 {
		return fire
	}
	total, over := k.starts.sum(now)
	if total == 0 || total < int64(a.cfg.MinSamples) {
		return fire
	}
	v := healthy
	if over*100 > total { // p99 (nearest rank) > bound ⇔ more than 1% above it
		v = breached
	}
	changed, resolved := a.transition(&k.rules[RuleStartLag], v, now)
	if !changed {
		return fire
	}
	frac := float64(over) / float64(total)
	return append(fire, Alert{
		Rule: RuleStartLag, Kind: kind, Resolved: resolved, At: now, Value: frac, Samples: int(total),
		Message: resolvedPrefix(resolved) + fmt.Sprintf("ax: kind %q start lag: %.1f%% of %d starts in the last %s later than %s (p99 is above it when more than 1%% are)",
			kind, 100*frac, total, a.cfg.Window, a.cfg.StartLagP99),
	})
}

// resolvedPrefix starts the message of a resolved alert.
func resolvedPrefix(resolved bool) string {
	if resolved {
		return "resolved: "
	}
	return ""
}

// transition moves a rule's state on verdict v at now and reports whether
// it started firing (changed) or resolved (changed and resolved).
func (a *Alerter) transition(rs *ruleState, v verdict, now time.Time) (changed, resolved bool) {
	switch {
	case v == breached && !rs.firing:
		if rs.fired && now.Sub(rs.lastFired) < a.cfg.MinInterval {
			return false, false // too soon after the last firing; a later event retries
		}
		rs.firing, rs.fired, rs.lastFired = true, true, now
		return true, false
	case v == healthy && rs.firing:
		rs.firing = false
		return true, true
	}
	return false, false
}

// slidingCounts sums two counters over a sliding window made of
// alertBuckets steps of width. The sums of the window are kept up to date
// by add within one step and recomputed when the step changes, so add and
// sum take constant time per event.
type slidingCounts struct {
	width   time.Duration
	buckets [alertBuckets]countBucket
	sumStep int64 // the step sumA and sumB are valid for
	sumA    int64
	sumB    int64
}

type countBucket struct {
	step int64 // time / width of the bucket's step
	a, b int64
}

func newSlidingCounts(width time.Duration) slidingCounts {
	return slidingCounts{width: width, sumStep: -1}
}

func (w *slidingCounts) step(now time.Time) int64 { return now.UnixNano() / int64(w.width) }

func (w *slidingCounts) add(now time.Time, a, b int64) {
	s := w.step(now)
	bk := &w.buckets[(s%alertBuckets+alertBuckets)%alertBuckets]
	if bk.step > s {
		return // older than the window (an event from a slower clock)
	}
	if bk.step != s {
		*bk = countBucket{step: s}
	}
	bk.a += a
	bk.b += b
	if s == w.sumStep {
		w.sumA += a
		w.sumB += b
	} else {
		w.resum(s)
	}
}

// sum returns the counters of the buckets within the window ending now.
func (w *slidingCounts) sum(now time.Time) (a, b int64) {
	if s := w.step(now); s != w.sumStep {
		w.resum(s)
	}
	return w.sumA, w.sumB
}

// resum recomputes the sums for the window ending at step s.
func (w *slidingCounts) resum(s int64) {
	w.sumStep, w.sumA, w.sumB = s, 0, 0
	for _, bk := range w.buckets {
		if bk.step > s-alertBuckets && bk.step <= s {
			w.sumA += bk.a
			w.sumB += bk.b
		}
	}
}

// setDefault sets *v to def when it is the zero value.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
