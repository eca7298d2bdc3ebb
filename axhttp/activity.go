package axhttp

import (
	"slices"
	"sync"
	"time"

	"github.com/axsched/ax"
)

// ActivityMinutes is how many minutes an Activity remembers.
const ActivityMinutes = 60

// maxActivityKinds bounds the kinds an Activity tracks; events of further
// kinds are not counted.
const maxActivityKinds = 1000

// Activity is an ax.Observer that keeps, per kind, a ring of per-minute
// samples over the last hour: jobs started, succeeded and failed, and the
// start lag of the jobs started. It feeds the dashboard's charts. It is
// this host's view: it counts the events of the Scheduler it observes,
// not the cluster's (every host's dashboard shows its own), and it starts
// empty when the process does. Add it to ax.Config.Observers and to
// Config.Activity. Safe for concurrent use; Observe takes a mutex and
// does a few additions.
type Activity struct {
	mu    sync.Mutex
	now   func() time.Time
	kinds map[string]*[ActivityMinutes]minuteSample
}

// minuteSample is one minute of one kind.
type minuteSample struct {
	minute    int64 // Unix minutes; a slot holding another minute is stale
	started   int
	succeeded int
	failed    int
	lagSum    time.Duration
	lagMax    time.Duration
}

// NewActivity returns an empty Activity on the host clock (now, or
// time.Now when nil).
func NewActivity(now func() time.Time) *Activity {
	if now == nil {
		now = time.Now
	}
	return &Activity{now: now, kinds: make(map[string]*[ActivityMinutes]minuteSample)}
}

// Observe implements ax.Observer.
func (a *Activity) Observe(e ax.Event) {
	switch e.Kind {
	case ax.EventStarted, ax.EventSucceeded, ax.EventFailed:
	default:
		return
	}
	at := e.At
	if at.IsZero() {
		at = a.now()
	}
	m := at.Unix() / 60
	a.mu.Lock()
	defer a.mu.Unlock()
	ring := a.kinds[e.JobKind]
	if ring == nil {
		if len(a.kinds) >= maxActivityKinds {
			return
		}
		ring = new([ActivityMinutes]minuteSample)
		a.kinds[e.JobKind] = ring
	}
	s := &ring[m%ActivityMinutes]
	if s.minute != m {
		*s = minuteSample{minute: m}
	}
	switch e.Kind {
	case ax.EventStarted:
		s.started++
		s.lagSum += e.StartLag
		s.lagMax = max(s.lagMax, e.StartLag)
	case ax.EventSucceeded:
		s.succeeded++
	default: // failed: to be retried, or dead (EventDead follows for the same attempt)
		s.failed++
	}
}

// MinuteStats is one minute of one kind's activity on this host.
type MinuteStats struct {
	// Start is the minute's start.
	Start time.Time `json:"start"`
	// Started, Succeeded and Failed count the attempts that started,
	// succeeded and failed (to be retried, or dead) in the minute.
	Started int `json:"started"`
	// Succeeded counts the attempts that succeeded.
	Succeeded int `json:"succeeded"`
	// Failed counts the attempts that failed.
	Failed int `json:"failed"`
	// LagAvg and LagMax are the mean and the largest start lag of the
	// attempts started in the minute (zero without any).
	LagAvg time.Duration `json:"lag_avg"`
	// LagMax is the largest start lag of the minute.
	LagMax time.Duration `json:"lag_max"`
}

// Minutes returns the kind's last ActivityMinutes minutes, oldest first,
// the current (partial) minute last; minutes without events are zero.
func (a *Activity) Minutes(kind string) []MinuteStats {
	now := a.now().Unix() / 60
	out := make([]MinuteStats, ActivityMinutes)
	a.mu.Lock()
	ring := a.kinds[kind]
	for i := range out {
		m := now - int64(ActivityMinutes-1-i)
		out[i].Start = time.Unix(m*60, 0)
		if ring == nil {
			continue
		}
		s := ring[m%ActivityMinutes]
		if s.minute != m {
			continue
		}
		out[i].Started, out[i].Succeeded, out[i].Failed, out[i].LagMax = s.started, s.succeeded, s.failed, s.lagMax
		if s.started > 0 {
			out[i].LagAvg = s.lagSum / time.Duration(s.started)
		}
	}
	a.mu.Unlock()
	return out
}

// Kinds returns the kinds the Activity has seen, sorted.
func (a *Activity) Kinds() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.kinds))
	for k := range a.kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
