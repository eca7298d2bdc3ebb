package ax

import "time"

// keepAliveTimeout bounds a store call that keeps something of this host's
// alive and is made every interval: a beat's extension of the job leases
// it holds (heartbeat.go), the renewal or taking of the maintenance
// leadership (leader.go), the node row's heartbeat (nodes.go). The call
// may run until what it keeps alive lapses on this host's clock, and
// never less than interval.
//
// Bounded by interval alone, such a call failed at every try once the
// store took longer than the interval to answer (a loaded server; a
// connection being opened, which the next try began again), and the host
// lost what a slower answer would have kept: in a loaded CI run, every
// beat of TestHeartbeatsNeverStarve timed out for a whole lease (100 ms
// beats, 2 s leases), and the host cancelled its 100 running handlers.
// Calls do not pile up: each loop makes its calls one at a time, and a
// slow call delays the next beat or round instead. What a call keeps
// alive counts from the call's start, so a store that answers every call
// within half of it (half a lease, half of LeaderTTL) keeps everything
// alive; bounded by the interval, it had to answer within a third.
func keepAliveTimeout(interval time.Duration, now, lapse time.Time) time.Duration {
	return max(interval, lapse.Sub(now))
}
