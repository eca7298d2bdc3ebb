package axhttp

import (
	"net/http"
	"time"

	"github.com/axsched/ax/store"
)

// Charts from the store: when the store is a store.ActivityReader
// (pgstore, memstore), the overview's charts summarize the jobs that
// finished in the window, read from the store (pgstore: its history, by
// the finished_at indexes, reading the window's rows only), so every
// replica, ax serve included, draws the same picture. Otherwise they fall
// back to Config.Activity, this host's own events.

// storeActivity reads the window rng ("hour" or "day") of the store's
// activity as per-kind series of MinuteStats (one per bucket, oldest
// first, the current partial bucket last); ok is false when the store
// keeps no activity.
func (h *Handler) storeActivity(r *http.Request, rng string) (series map[string][]MinuteStats, win chartWindow, ok bool, err error) {
	ar, ok := h.store.(store.ActivityReader)
	cr, known := chartRanges[rng]
	if !ok || !known {
		return nil, chartWindow{}, false, nil
	}
	now := h.cfg.Clock()
	since := now.Truncate(cr.step).Add(-time.Duration(cr.count-1) * cr.step)
	until := since.Add(time.Duration(cr.count) * cr.step)
	buckets, err := ar.Activity(r.Context(), since, until, cr.step)
	if err != nil {
		return nil, cr.win, true, err
	}
	series = map[string][]MinuteStats{}
	for _, b := range buckets {
		if b.Index < 0 || b.Index >= cr.count {
			continue
		}
		ms := series[b.Kind]
		if ms == nil {
			ms = make([]MinuteStats, cr.count)
			for i := range ms {
				ms[i].Start = since.Add(time.Duration(i) * cr.step)
			}
			series[b.Kind] = ms
		}
		m := &ms[b.Index]
		m.Succeeded += int(b.Succeeded)
		m.Failed += int(b.Dead)
		m.Started += int(b.Started)
		m.LagMax = max(m.LagMax, b.LagMax)
		if m.Started > 0 {
			m.LagAvg = b.LagSum / time.Duration(b.Started)
		}
	}
	return series, cr.win, true, nil
}

// emptySeries is a window of buckets without jobs.
func emptySeries(rng string, now time.Time) []MinuteStats {
	cr := chartRanges[rng]
	since := now.Truncate(cr.step).Add(-time.Duration(cr.count-1) * cr.step)
	ms := make([]MinuteStats, cr.count)
	for i := range ms {
		ms[i].Start = since.Add(time.Duration(i) * cr.step)
	}
	return ms
}
