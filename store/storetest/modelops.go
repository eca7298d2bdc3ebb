package storetest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// The operations of RunModel. Each draws its parameters from the run's
// random source, applies them to the store, checks what the call returned
// against the model, and applies them to the model.

// ops returns the operations the store supports, with their weights.
func (r *modelRun) ops() []modelOp {
	ops := []modelOp{
		{"insert", 20, (*modelRun).opInsert},
		{"insert-existing-id", 1, (*modelRun).opInsertExistingID},
		{"claim", 14, (*modelRun).opClaim},
		{"extend", 5, (*modelRun).opExtend},
		{"finish", 16, (*modelRun).opFinish},
		{"control", 16, (*modelRun).opControl},
		{"rescue", 3, (*modelRun).opRescue},
		{"prune", 1, (*modelRun).opPrune},
	}
	if r.ms.Advance != nil {
		ops = append(ops, modelOp{"advance", 3, (*modelRun).opAdvance})
	}
	if r.ms.CompleteTx != nil {
		ops = append(ops, modelOp{"complete-tx", 5, (*modelRun).opCompleteTx})
	}
	if r.bulk != nil {
		ops = append(ops, modelOp{"bulk", 6, (*modelRun).opBulk})
	}
	if r.archiver != nil {
		ops = append(ops, modelOp{"archive", 3, (*modelRun).opArchive})
	}
	if r.riders != nil {
		ops = append(ops, modelOp{"finish-claim", 8, (*modelRun).opFinishClaim})
	}
	if r.batches != nil {
		ops = append(ops, modelOp{"insert-batch", 4, (*modelRun).opInsertBatch}, modelOp{"cancel-batch", 1, (*modelRun).opCancelBatch})
	}
	return ops
}

// modelPast is the base of run_at times given as absolute times in the
// past, known exactly.
var modelPast = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// key returns a key from the run's small pool, so that keys collide.
func (r *modelRun) key() string { return pick(r, r.keys) }

// scope returns a random unique scope.
func (r *modelRun) scope() store.UniqueScope {
	var s store.UniqueScope
	s.Global = r.chance(1, 4)
	s.Finished = r.chance(1, 4)
	if r.chance(1, 3) {
		s.Period = pick(r, r.periods)
	}
	return s
}

// genParams returns a random job of kind.
func (r *modelRun) genParams(kind string) store.InsertParams {
	p := store.InsertParams{
		ID: r.newID(), Kind: kind, Payload: fmt.Appendf(nil, `{"n":%d}`, r.rng.IntN(1000)),
		Priority: pick(r, store.Priorities), MaxAttempts: 1 + r.rng.IntN(3),
	}
	switch r.rng.IntN(4) {
	case 0:
		p.Delay = r.far
	case 1:
		p.RunAt = modelPast.Add(time.Duration(r.rng.IntN(3600)) * time.Second)
	}
	if r.chance(3, 5) {
		p.UniqueKey, p.Unique = r.key(), r.scope()
		if h, ok := r.habits[p.UniqueKey]; ok && r.chance(3, 4) {
			// Mostly the key's usual kind and scope, so that jobs meet
			// in one scope (and window) often.
			p.Kind, p.Unique = h.kind, h.scope
		} else if !ok {
			r.habits[p.UniqueKey] = keyHabit{kind: p.Kind, scope: p.Unique}
		}
	}
	if r.fus != nil && r.chance(1, 4) {
		for i := range 1 + r.rng.IntN(2) {
			var on []store.State
			for _, st := range []store.State{store.StateSucceeded, store.StateDead, store.StateCancelled} {
				if r.chance(1, 2) {
					on = append(on, st)
				}
			}
			if len(on) == 0 {
				on = []store.State{store.StateDead}
			}
			p.FollowUps = append(p.FollowUps, store.FollowUp{On: on, Job: store.InsertParams{
				Kind: "f", Payload: fmt.Appendf(nil, `{"fu":%d}`, i), Priority: store.PriorityNormal, MaxAttempts: 2,
			}})
		}
	}
	return p
}

// safeWindows waits, on a real clock, until no unique period of ps ends
// within modelPeriodSafety, so that the model knows each insert's window.
func (r *modelRun) safeWindows(ps []store.InsertParams) {
	if r.ms.Advance != nil {
		return
	}
	for _, p := range ps {
		if p.UniqueKey == "" || p.Unique.Period <= 0 {
			continue
		}
		now := r.storeNow()
		if windowOf(now, p.Unique.Period) != windowOf(now.Add(modelPeriodSafety), p.Unique.Period) {
			r.passTime(0, now.Add(modelPeriodSafety))
		}
	}
}

// insertRows checks an insert's results row by row against the model, in
// order (a row's key may be held by an earlier row), and adds the jobs
// inserted. batch is the batch of the rows, if any.
func (r *modelRun) insertRows(ps []store.InsertParams, res []store.InsertResult, batch uuid.UUID) {
	r.t.Helper()
	if len(res) != len(ps) {
		r.failf("insert: %d results for %d rows", len(res), len(ps))
	}
	for i := range ps {
		p := &ps[i]
		var window int64
		if p.UniqueKey != "" && p.Unique.Period > 0 {
			window = windowOf(r.now.lo, p.Unique.Period)
			if window != windowOf(r.now.hi, p.Unique.Period) {
				// The call straddled a window's end: the model cannot
				// know which window it used, so the key leaves the run.
				r.t.Logf("model: step %d: insert straddled a window of %s; key %q retired", r.step, p.Unique.Period, p.UniqueKey)
				r.retireKey(p.UniqueKey)
			}
		}
		if p.UniqueKey != "" && !r.m.tainted[p.UniqueKey] {
			if h := r.m.holder(identOf(p.Kind, p.UniqueKey, p.Unique, window)); h != nil {
				if !res[i].Duplicate || res[i].ID != h.id {
					r.failf("insert row %d (%s key %q %+v): model: duplicate of %s (%s), store: %+v", i, p.Kind, p.UniqueKey, p.Unique, h.id, h.state, res[i])
				}
				continue
			}
		}
		if r.m.tainted[p.UniqueKey] && res[i].Duplicate {
			continue
		}
		if res[i].Duplicate || res[i].ID != p.ID {
			var holders []string
			for _, j := range r.m.jobs {
				if j.key == p.UniqueKey && j.key != "" {
					holders = append(holders, fmt.Sprintf("%s %s %s %+v w%d deleted=%v", j.id, j.kind, j.state, j.scope, j.window, j.deleted))
				}
			}
			r.failf("insert row %d (%s key %q %+v window %d): model: inserted as %s, store: %+v; jobs with the key: %v", i, p.Kind, p.UniqueKey, p.Unique, window, p.ID, res[i], holders)
		}
		r.m.newJob(p, r.now, window, uuid.Nil, batch)
		r.touched[p.ID] = true
	}
}

// retireKey stops the run using key.
func (r *modelRun) retireKey(key string) {
	r.m.tainted[key] = true
	for i, k := range r.keys {
		if k == key {
			r.keys[i] = r.newKey()
		}
	}
}

func (r *modelRun) opInsert() {
	n := 1 + r.rng.IntN(3)
	var ps []store.InsertParams
	for range n {
		ps = append(ps, r.genParams(pick(r, modelKinds)))
	}
	if n > 1 && r.chance(1, 3) {
		// Two rows of one call with the same key: the second meets the
		// first.
		ps[n-1].Kind, ps[n-1].UniqueKey, ps[n-1].Unique = ps[0].Kind, r.key(), ps[0].Unique
		ps[0].UniqueKey = ps[n-1].UniqueKey
	}
	r.note("insert %s", describeParams(ps))
	r.safeWindows(ps)
	r.begin()
	res, err := r.st.Insert(r.ctx, ps)
	r.end()
	r.must(err, "insert")
	r.insertRows(ps, res, uuid.Nil)
}

func describeParams(ps []store.InsertParams) string {
	s := ""
	for _, p := range ps {
		s += fmt.Sprintf("[%s %s prio %d max %d", p.ID, p.Kind, p.Priority, p.MaxAttempts)
		if p.UniqueKey != "" {
			s += fmt.Sprintf(" key %q %+v", p.UniqueKey, p.Unique)
		}
		switch {
		case !p.RunAt.IsZero():
			s += " at " + p.RunAt.Format(time.RFC3339)
		case p.Delay > 0:
			s += " later"
		}
		if len(p.FollowUps) > 0 {
			s += fmt.Sprintf(" %d follow-ups", len(p.FollowUps))
		}
		s += "] "
	}
	return s
}

// opInsertExistingID inserts a row whose ID a job has, alone or after a
// fresh row: the call fails with ErrInvalidParams and inserts nothing.
// The job may be live or finished (in pgstore, then often in its
// history: issue 41).
func (r *modelRun) opInsertExistingID() {
	jobs := r.m.live()
	if len(jobs) == 0 {
		return
	}
	old := pick(r, jobs)
	fresh := r.genParams("a")
	fresh.UniqueKey = ""
	dup := r.genParams("b")
	dup.ID, dup.UniqueKey = old.id, ""
	rows := []store.InsertParams{fresh, dup}
	if r.chance(1, 2) {
		rows = rows[1:]
	}
	r.note("insert %s with an existing id %s (%s)", fresh.ID, old.id, old.state)
	_, err := r.st.Insert(r.ctx, rows)
	if !errors.Is(err, store.ErrInvalidParams) {
		r.failf("insert with the existing id %s (%s): want ErrInvalidParams, got %v", old.id, old.state, err)
	}
	if _, err := r.st.Get(r.ctx, fresh.ID); !errors.Is(err, store.ErrNotFound) {
		r.failf("insert failed but its other row %s exists: %v", fresh.ID, err)
	}
	r.touched[old.id] = true
}

// due reports whether j, claimable, is due at a claim in r's next
// operation (run_at at or before the store's now). A run_at inside the
// operation's span cannot happen: every run_at is stamped by an earlier
// operation or is far from now.
func (r *modelRun) due(j *mjob, now span) bool {
	switch {
	case !j.runAt.hi.After(now.lo):
		return true
	case j.runAt.lo.After(now.hi):
		return false
	}
	r.failf("job %s: run_at %s is undecided at %s", j.id, j.runAt, now)
	return false
}

// modelAgeAfter is the priority aging bound of the model's claims that
// age (genClaim): the jobs due at modelPast's hour are aged, those the run
// stamped with its own clock are not, whatever the store's clock did.
const modelAgeAfter = 100 * time.Hour

// precedes reports whether a must be claimed before b by a claim with
// priority aging bound age (0 for none) at now: the jobs due for age
// first, by run_at whatever their priority, then by priority and run_at,
// strictly.
func (r *modelRun) precedes(a, b *mjob, age time.Duration, now span) bool {
	if age > 0 {
		aa, ab := r.aged(a, age, now), r.aged(b, age, now)
		switch {
		case aa != ab:
			return aa
		case aa:
			return a.runAt.hi.Before(b.runAt.lo)
		}
	}
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return a.runAt.hi.Before(b.runAt.lo)
}

// aged reports whether j has been due for at least age at now.
func (r *modelRun) aged(j *mjob, age time.Duration, now span) bool {
	switch {
	case !j.runAt.hi.After(now.lo.Add(-age)):
		return true
	case j.runAt.lo.After(now.hi.Add(-age)):
		return false
	}
	r.failf("job %s: run_at %s is undecided for aging by %s at %s", j.id, j.runAt, age, now)
	return false
}

func (r *modelRun) opClaim() {
	p, short := r.genClaim()
	if len(p.Kinds) == 0 {
		return
	}
	r.note("claim %+v", *p)
	r.begin()
	res, err := r.st.Claim(r.ctx, p)
	r.end()
	r.must(err, "claim")
	r.checkClaim(p, short, res)
}

// genClaim returns random claim params (possibly of no kind), and
// whether their lease is the short one.
func (r *modelRun) genClaim() (*store.ClaimParams, bool) {
	p := &store.ClaimParams{Owner: pick(r, []string{"n1", "n2"}), Limit: 1 + r.rng.IntN(6), LeaseDuration: r.longLease}
	short := r.chance(1, 3)
	if short {
		p.LeaseDuration = r.shortLease
	}
	if r.aging && r.chance(1, 2) {
		p.AgeAfter = modelAgeAfter
	}
	if r.chance(1, 3) {
		// One kind: a store may claim it by another statement
		// (pgstore's claim of one kind).
		p.Kinds = append(p.Kinds, store.KindLimit{Kind: pick(r, modelAllKinds), Limit: 1 + r.rng.IntN(4)})
		return p, short
	}
	for _, k := range modelAllKinds {
		if r.chance(2, 3) {
			p.Kinds = append(p.Kinds, store.KindLimit{Kind: k, Limit: 1 + r.rng.IntN(4)})
		}
	}
	return p, short
}

// checkClaim checks what a claim with p returned against the model, and
// applies it to the model.
func (r *modelRun) checkClaim(p *store.ClaimParams, short bool, res *store.ClaimResult) {
	limits := map[string]int{}
	for _, k := range p.Kinds {
		limits[k.Kind] = k.Limit
	}
	// The candidates, and how many a greedy claim takes.
	var cands []*mjob
	perKind := map[string]int{}
	for _, id := range r.m.order {
		j := r.m.jobs[id]
		if j.deleted || !j.state.Claimable() || limits[j.kind] == 0 || !(r.dueAtOnce[j.id] || r.due(j, r.now)) {
			continue
		}
		cands = append(cands, j)
		perKind[j.kind]++
	}
	want := 0
	for k, n := range perKind {
		want += min(n, limits[k])
	}
	want = min(want, p.Limit)
	if len(res.Jobs) != want {
		r.failf("claim: model takes %d of %d candidates, store took %d", want, len(cands), len(res.Jobs))
	}
	got := map[uuid.UUID]bool{}
	taken := map[string]int{}
	for i, rec := range res.Jobs {
		j := r.m.jobs[rec.ID]
		if j == nil || !slices.Contains(cands, j) || got[rec.ID] {
			r.failf("claim: store took %s, not a candidate (or twice)", rec.ID)
		}
		got[rec.ID] = true
		taken[j.kind]++
		if i > 0 && r.precedes(j, r.m.jobs[res.Jobs[i-1].ID], p.AgeAfter, r.now) {
			r.failf("claim: jobs not in claim order: %s after %s", j.id, res.Jobs[i-1].ID)
		}
	}
	for k, n := range taken {
		if n > limits[k] {
			r.failf("claim: %d jobs of %s, limit %d", n, k, limits[k])
		}
	}
	for _, c := range cands {
		if got[c.id] {
			continue
		}
		for _, rec := range res.Jobs {
			j := r.m.jobs[rec.ID]
			if r.precedes(c, j, p.AgeAfter, r.now) && (c.kind == j.kind || taken[c.kind] < limits[c.kind]) {
				r.failf("claim: left %s (prio %d, run_at %s) and took %s (prio %d, run_at %s)", c.id, c.prio, c.runAt, j.id, j.prio, j.runAt)
			}
		}
	}
	for _, rec := range res.Jobs {
		j := r.m.jobs[rec.ID]
		if rec.LeaseToken == uuid.Nil || rec.LeaseToken == j.token {
			r.failf("claim: job %s got lease token %s", j.id, rec.LeaseToken)
		}
		j.state, j.attempt, j.fence = store.StateRunning, j.attempt+1, j.fence+1
		j.token, j.owner, j.shortLease = rec.LeaseToken, p.Owner, short
		j.leaseExp, j.attemptedAt = r.now.add(p.LeaseDuration), r.now
		if d := j.diff(rec); d != "" {
			r.failf("claim: returned job %s: %s", j.id, d)
		}
		r.touched[j.id] = true
	}
}

// running returns the running jobs, in the model's order.
func (r *modelRun) running() []*mjob {
	var out []*mjob
	for _, id := range r.m.order {
		if j := r.m.jobs[id]; !j.deleted && j.state == store.StateRunning {
			out = append(out, j)
		}
	}
	return out
}

// leases returns up to n leases: held ones, and sometimes a stale one.
func (r *modelRun) leases(n int) []store.Lease {
	var out []store.Lease
	run := r.running()
	r.rng.Shuffle(len(run), func(i, k int) { run[i], run[k] = run[k], run[i] })
	for _, j := range run[:min(n, len(run))] {
		out = append(out, store.Lease{ID: j.id, Token: j.token})
	}
	if len(r.stale) > 0 && (len(out) == 0 || r.chance(1, 5)) {
		out = append(out, pick(r, r.stale))
	}
	return out
}

// held returns the job running under l, or nil.
func (r *modelRun) held(l store.Lease) *mjob {
	j := r.m.jobs[l.ID]
	if j == nil || j.deleted || j.state != store.StateRunning || j.token != l.Token {
		return nil
	}
	return j
}

func (r *modelRun) opExtend() {
	ls := r.leases(1 + r.rng.IntN(3))
	if len(ls) == 0 {
		return
	}
	short := r.chance(1, 3)
	p := &store.ExtendParams{Leases: ls, Duration: r.longLease}
	if short {
		p.Duration = r.shortLease
	}
	r.note("extend %v short=%v", ls, short)
	r.begin()
	res, err := r.st.ExtendLeases(r.ctx, p)
	r.end()
	r.must(err, "extend leases")
	var lost, cancel []store.Lease
	for _, l := range ls {
		j := r.held(l)
		if j == nil {
			lost = append(lost, l)
			continue
		}
		if j.cancelReq {
			cancel = append(cancel, l)
		}
		j.leaseExp, j.shortLease = r.now.add(p.Duration), short
		r.touched[j.id] = true
	}
	if !sameLeases(lost, res.Lost) || !sameLeases(cancel, res.CancelRequested) {
		r.failf("extend: model lost %v cancel %v, store lost %v cancel %v", lost, cancel, res.Lost, res.CancelRequested)
	}
}

func sameLeases(a, b []store.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			return false
		}
	}
	return true
}

// genFinish returns a random outcome for lease l.
func (r *modelRun) genFinish(l store.Lease, i int) store.FinishParams {
	p := store.FinishParams{Lease: l, Outcome: store.Outcome(1 + r.rng.IntN(6)), Error: fmt.Sprintf("boom %d.%d", r.step, i)}
	if (p.Outcome == store.OutcomeRetry || p.Outcome == store.OutcomeSnooze) && r.chance(1, 3) {
		p.Delay = r.far
	}
	if r.fus != nil && r.chance(1, 3) {
		p.Result = fmt.Appendf(nil, `{"step": %d}`, r.step)
	}
	if r.fus != nil && p.Outcome == store.OutcomeSucceeded && r.chance(1, 3) {
		p.Then = []store.InsertParams{{ID: r.newID(), Kind: "t", Payload: []byte(`{"then":1}`), Priority: store.PriorityHigh, MaxAttempts: 1}}
	}
	return p
}

func (r *modelRun) opFinish() {
	ps := r.genFinishes()
	if len(ps) == 0 {
		return
	}
	r.note("finish %s", describeFinish(ps))
	r.begin()
	ok, err := r.st.Finish(r.ctx, ps)
	r.end()
	r.must(err, "finish")
	r.checkFinish(ps, ok)
}

// opFinishClaim writes outcomes and claims in one FinishClaim call: the
// model applies the outcomes, then the claim.
func (r *modelRun) opFinishClaim() {
	ps := r.genFinishes()
	p, short := r.genClaim()
	if len(p.Kinds) == 0 {
		return
	}
	r.note("finish-claim %s; claim %+v", describeFinish(ps), *p)
	r.begin()
	fr, res, err := r.riders.FinishClaim(r.ctx, ps, p)
	r.end()
	r.must(err, "finish-claim")
	// A follow-up the outcomes released may be claimed already: checked
	// as claimed (checkClaim), not as it was released.
	r.claimedNow = map[uuid.UUID]bool{}
	for _, rec := range res.Jobs {
		r.claimedNow[rec.ID] = true
	}
	r.checkFinish(ps, fr.OK)
	// The claim comes after the outcomes (store.FinishClaimer): a job
	// they made due at the call's own now (a retry without delay, a
	// follow-up its parent's end released) is due to it, though its
	// run_at lies in the call's span.
	r.dueAtOnce = map[uuid.UUID]bool{}
	for _, id := range r.m.order {
		if j := r.m.jobs[id]; j.runAt == r.now {
			r.dueAtOnce[id] = true
		}
	}
	r.checkClaim(p, short, res)
	r.dueAtOnce, r.claimedNow = nil, nil
}

// genFinishes returns outcomes for up to three held or stale leases, each
// lease once; none when no job ever ran.
func (r *modelRun) genFinishes() []store.FinishParams {
	var ps []store.FinishParams
	seen := map[store.Lease]bool{}
	for i, l := range r.leases(1 + r.rng.IntN(3)) {
		if !seen[l] {
			seen[l] = true
			ps = append(ps, r.genFinish(l, i))
		}
	}
	return ps
}

// checkFinish checks a Finish's ok flags for ps against the model, and
// applies the outcomes to the model.
func (r *modelRun) checkFinish(ps []store.FinishParams, ok []bool) {
	if len(ok) != len(ps) {
		r.failf("finish: %d results for %d rows", len(ok), len(ps))
	}
	var ends []ended
	for i := range ps {
		j := r.held(ps[i].Lease)
		if ok[i] != (j != nil) {
			r.failf("finish row %d (%s): model applies %v, store %v", i, ps[i].Lease.ID, j != nil, ok[i])
		}
		if j != nil {
			ends = append(ends, r.applyFinish(j, &ps[i])...)
		}
	}
	r.learnFollowUps(ends)
}

func describeFinish(ps []store.FinishParams) string {
	s := ""
	for _, p := range ps {
		s += fmt.Sprintf("[%s %s delay %s then %d] ", p.Lease.ID, p.Outcome, p.Delay, len(p.Then))
	}
	return s
}

// applyFinish applies one held outcome to the model (store.Store.Finish).
func (r *modelRun) applyFinish(j *mjob, p *store.FinishParams) []ended {
	now := r.now
	r.touched[j.id] = true
	r.stale = append(r.stale, store.Lease{ID: j.id, Token: j.token})
	out := p.Outcome
	switch out {
	case store.OutcomeRetry, store.OutcomeDead, store.OutcomeCancelled:
		j.errs = append(j.errs, merr{attempt: j.attempt, at: now, text: p.Error})
	}
	if out == store.OutcomeSnooze {
		j.snoozes, j.snoozedAt = j.snoozes+1, now
	}
	reschedules := out == store.OutcomeRetry || out == store.OutcomeSnooze || out == store.OutcomeRelease
	if j.cancelReq && reschedules {
		out = store.OutcomeCancelled
	}
	paused := j.pauseReq && reschedules
	j.leaveRunning()
	switch out {
	case store.OutcomeSucceeded:
		j.state = store.StateSucceeded
	case store.OutcomeRetry:
		j.state, j.runAt = store.StateRetrying, now.add(p.Delay)
	case store.OutcomeDead:
		j.state = store.StateDead
	case store.OutcomeSnooze:
		j.state, j.runAt, j.attempt = store.StateScheduled, now.add(p.Delay), max(j.attempt-1, 0)
	case store.OutcomeRelease:
		j.state, j.runAt, j.attempt = store.StateScheduled, now, max(j.attempt-1, 0)
	case store.OutcomeCancelled:
		j.state = store.StateCancelled
	}
	if paused && !j.state.Final() {
		j.state = store.StatePaused
	}
	if p.Result != nil {
		j.result = p.Result
	}
	if j.state == store.StateSucceeded {
		for i := range p.Then {
			if r.m.jobs[p.Then[i].ID] == nil {
				t := p.Then[i]
				t.UniqueKey = ""
				r.m.newJob(&t, now, 0, j.id, uuid.Nil)
				r.touched[t.ID] = true
			}
		}
	}
	if j.state.Final() {
		return r.finalize(j, now)
	}
	return nil
}

// finalize is model.finalize, marking what it changed as touched.
func (r *modelRun) finalize(j *mjob, now span) []ended {
	n := len(r.m.order)
	ends := r.m.finalize(j, now)
	for _, id := range r.m.order[n:] {
		r.touched[id] = true
	}
	return ends
}

// learnFollowUps matches the follow-ups the model expects with the jobs
// the store inserted (their IDs are the store's), and adds them.
func (r *modelRun) learnFollowUps(ends []ended) {
	r.t.Helper()
	r.settleParents()
	r.learnCompletions()
	for _, e := range ends {
		recs, err := r.fus.FollowUps(r.ctx, e.parent.id)
		r.must(err, "follow-ups")
		var fresh []*store.JobRecord
		for _, rec := range recs {
			if r.m.jobs[rec.ID] == nil {
				fresh = append(fresh, rec)
			}
		}
		if len(fresh) != len(e.followUps) {
			r.failf("follow-ups of %s (%s): model expects %d new, store has %d new of %d", e.parent.id, e.parent.state, len(e.followUps), len(fresh), len(recs))
		}
		for _, p := range e.followUps {
			i := slices.IndexFunc(fresh, func(rec *store.JobRecord) bool { return jsonEqual(rec.Payload, p.Payload) })
			if i < 0 {
				r.failf("follow-ups of %s: none with payload %s", e.parent.id, p.Payload)
			}
			p.ID = fresh[i].ID
			j := r.m.newJob(&p, e.now, 0, e.parent.id, uuid.Nil)
			if d := j.diff(fresh[i]); d != "" && !r.claimedNow[j.id] {
				r.failf("follow-up %s of %s: %s", j.id, e.parent.id, d)
			}
			fresh = slices.Delete(fresh, i, i+1)
			r.touched[j.id] = true
		}
	}
}

// learnCompletions learns the fresh IDs of the completion jobs the last
// operation inserted again (reopened batches that completed again): each
// is among the follow-ups of one of the children whose ends completed its
// batch, the one with the batch that the model does not know.
func (r *modelRun) learnCompletions() {
	r.t.Helper()
	for _, rc := range r.m.recompleted {
		b := rc.batch
		var found *store.JobRecord
		for _, id := range rc.choices {
			recs, err := r.fus.FollowUps(r.ctx, id)
			r.must(err, "follow-ups")
			for _, rec := range recs {
				if rec.Batch != b.id || r.m.jobs[rec.ID] != nil {
					continue
				}
				if found != nil {
					r.failf("batch %s completed again: two new completion jobs %s and %s", b.id, found.ID, rec.ID)
				}
				found = rec
			}
		}
		if found == nil {
			r.failf("batch %s completed again: no new completion job among the follow-ups of %v", b.id, rc.choices)
		}
		p := b.completionParams
		p.ID = found.ID
		j := r.m.newJob(&p, rc.now, 0, found.Parent, b.id)
		if d := j.diff(found); d != "" && !r.claimedNow[j.id] {
			r.failf("completion job %s of batch %s, inserted again: %s", j.id, b.id, d)
		}
		r.touched[j.id] = true
	}
	r.m.recompleted = nil
}

// settleParents learns, for each completion job the last operation
// inserted when several of its batch's children ended in one call, which
// of them the store recorded as its Parent: any one may be (pgstore takes
// the greatest ID, memstore the last in the call's order).
func (r *modelRun) settleParents() {
	r.t.Helper()
	for _, c := range r.m.unsettled {
		got, err := r.st.Get(r.ctx, c.id)
		r.must(err, "get completion job")
		if got.Parent != c.parent {
			if !slices.Contains(c.parentChoices, got.Parent) {
				r.failf("completion job %s: parent %s, none of the children %v whose ends completed its batch", c.id, got.Parent, c.parentChoices)
			}
			r.m.setParent(c, got.Parent)
		}
	}
	r.m.unsettled = nil
}

func (r *modelRun) opCompleteTx() {
	ls := r.leases(1)
	if len(ls) == 0 {
		return
	}
	p := r.genFinish(ls[0], 0)
	commit := r.chance(2, 3)
	r.note("complete-tx %s commit=%v", describeFinish([]store.FinishParams{p}), commit)
	r.begin()
	ok, err := r.ms.CompleteTx(r.ctx, p, commit)
	r.end()
	r.must(err, "complete tx")
	j := r.held(p.Lease)
	if ok != (j != nil) {
		r.failf("complete tx %s: model applies %v, store %v", p.Lease.ID, j != nil, ok)
	}
	if j == nil {
		return
	}
	r.touched[j.id] = true
	if commit {
		r.learnFollowUps(r.applyFinish(j, &p))
	}
}

func (r *modelRun) opRescue() {
	var latest time.Time
	for _, j := range r.running() {
		if j.shortLease && j.leaseExp.hi.After(latest) {
			latest = j.leaseExp.hi
		}
	}
	r.note("rescue (short leases until %s)", latest)
	if !latest.IsZero() {
		r.passTime(r.shortLease+time.Second, latest)
	}
	r.begin()
	res, err := r.st.RescueExpired(r.ctx, 100000)
	r.end()
	r.must(err, "rescue")
	want := map[uuid.UUID]store.Rescued{}
	var ends []ended
	for _, j := range r.running() {
		if !j.shortLease {
			continue
		}
		r.touched[j.id] = true
		r.stale = append(r.stale, store.Lease{ID: j.id, Token: j.token})
		j.errs = append(j.errs, merr{attempt: j.attempt, at: r.now, rescue: true})
		cancelReq, pauseReq := j.cancelReq, j.pauseReq
		owner := j.owner
		j.leaveRunning()
		switch {
		case cancelReq:
			j.state = store.StateCancelled
		case j.attempt < j.maxAttempts && pauseReq:
			j.state, j.runAt = store.StatePaused, r.now
		case j.attempt < j.maxAttempts:
			j.state, j.runAt = store.StateRetrying, r.now
		default:
			j.state = store.StateDead
		}
		want[j.id] = store.Rescued{ID: j.id, Kind: j.kind, Owner: owner, Attempt: j.attempt, State: j.state}
		if j.state.Final() {
			ends = append(ends, r.finalize(j, r.now)...)
		}
	}
	if len(res) != len(want) {
		r.failf("rescue: model %v, store %v", want, res)
	}
	for _, g := range res {
		if want[g.ID] != g {
			r.failf("rescue: model %+v, store %+v", want[g.ID], g)
		}
	}
	r.learnFollowUps(ends)
}

func (r *modelRun) opAdvance() {
	d := time.Duration(1+r.rng.IntN(3)) * time.Second
	r.note("advance %s", d)
	r.ms.Advance(d)
}

func (r *modelRun) opArchive() {
	r.note("archive")
	for {
		n, err := r.archiver.Archive(r.ctx, 1000)
		r.must(err, "archive")
		if n < 1000 {
			return
		}
	}
}

func (r *modelRun) opPrune() {
	if r.pruner == nil {
		return
	}
	p := &store.PruneParams{Retention: r.longLease, Limit: 100000}
	var final []*mjob
	if r.chance(1, 2) {
		p.Retention = 0
		var latest time.Time
		for _, j := range r.m.live() {
			if j.state.Final() {
				final = append(final, j)
				latest = maxTime(latest, j.finishedAt.hi)
			}
		}
		if !latest.IsZero() {
			r.passTime(time.Second, latest)
		}
	}
	r.note("prune retention %s", p.Retention)
	n, err := r.pruner.Prune(r.ctx, p)
	r.must(err, "prune")
	if n != len(final) {
		r.failf("prune retention %s: model deletes %d, store %d", p.Retention, len(final), n)
	}
	for _, j := range final {
		j.deleted = true
		r.touched[j.id] = true
	}
}

// pickJob returns a known job (perhaps deleted: its operations must then
// fail with ErrNotFound), or nil when there is none.
func (r *modelRun) pickJob() *mjob {
	if len(r.m.order) == 0 {
		return nil
	}
	return r.m.jobs[pick(r, r.m.order)]
}

func (r *modelRun) opControl() {
	j := r.pickJob()
	if j == nil {
		return
	}
	op := store.ControlOp(1 + r.rng.IntN(4))
	if r.chance(1, 3) {
		// The way back from the history: mostly a dead or cancelled job.
		op = store.OpRunNow
		var final []*mjob
		for _, id := range r.m.order {
			if f := r.m.jobs[id]; !f.deleted && (f.state == store.StateDead || f.state == store.StateCancelled) {
				final = append(final, f)
			}
		}
		if len(final) > 0 && r.chance(3, 4) {
			j = pick(r, final)
		}
	}
	r.note("control %s %s (%s, key %q %+v)", op, j.id, j.state, j.key, j.scope)
	r.begin()
	got, err := r.st.Control(r.ctx, j.id, op)
	r.end()
	r.touched[j.id] = true
	if j.deleted {
		if !errors.Is(err, store.ErrNotFound) {
			r.failf("control %s of deleted %s: want ErrNotFound, got %v", op, j.id, err)
		}
		return
	}
	_, ends, wantErr := r.applyControl(j, op, r.now, err)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			r.failf("control %s of %s (%s): want %v, got %v", op, j.id, j.state, wantErr, err)
		}
		return
	}
	if err != nil {
		r.failf("control %s of %s: model allows it, store: %v", op, j.id, err)
	}
	if d := j.diff(got); d != "" {
		r.failf("control %s of %s: returned job: %s", op, j.id, d)
	}
	r.learnFollowUps(ends)
}

// applyControl applies op to j in the model at now, as store.ControlOp
// documents, and reports whether j changed, or the error the store must
// return (then nothing changed). storeErr settles what the model cannot
// know (a key whose window left the run).
func (r *modelRun) applyControl(j *mjob, op store.ControlOp, now span, storeErr error) (changed bool, ends []ended, err error) {
	st := j.state
	switch op {
	case store.OpCancel:
		switch {
		case st == store.StateCancelled:
			return false, nil, nil
		case st == store.StateRunning:
			changed = !j.cancelReq
			j.cancelReq = true
			return changed, nil, nil
		case st.Claimable() || st == store.StatePaused:
			j.state = store.StateCancelled
			return true, r.finalize(j, now), nil
		}
	case store.OpPause:
		switch {
		case st == store.StatePaused:
			return false, nil, nil
		case st == store.StateRunning:
			changed = !j.pauseReq
			j.pauseReq = true
			return changed, nil, nil
		case st.Claimable():
			j.state = store.StatePaused
			return true, nil, nil
		}
	case store.OpResume:
		switch {
		case st.Claimable():
			return false, nil, nil
		case st == store.StateRunning:
			changed = j.pauseReq
			j.pauseReq = false
			return changed, nil, nil
		case st == store.StatePaused:
			j.state = store.StateScheduled
			return true, nil, nil
		}
	case store.OpRunNow:
		switch {
		case st.Claimable() || st == store.StatePaused:
			j.state, j.runAt = store.StateScheduled, now
			return true, nil, nil
		case st == store.StateDead || st == store.StateCancelled:
			if j.key != "" {
				if r.m.tainted[j.key] {
					if errors.Is(storeErr, store.ErrWrongState) {
						return false, nil, store.ErrWrongState
					}
				} else if h := r.m.holder(j.ident()); h != nil && h != j {
					return false, nil, store.ErrWrongState
				}
			}
			j.state, j.runAt = store.StateScheduled, now
			j.maxAttempts = max(j.maxAttempts, j.attempt+1)
			j.finishedAt = span{}
			r.m.reopen(j)
			return true, nil, nil
		}
	}
	return false, nil, store.ErrWrongState
}

func (r *modelRun) opBulk() {
	p := &store.BulkParams{Filter: r.randomFilter(), Op: store.BulkOp(1 + r.rng.IntN(3)), Limit: 1 + r.rng.IntN(5)}
	if r.chance(1, 2) {
		p.Op = store.BulkRunNow
	}
	if p.Op != store.BulkCancel && r.chance(2, 3) {
		// Mostly finished jobs, the ones a bulk brings back from a
		// history; a small limit leaves some of them unpicked.
		p.Filter.States = []store.State{store.StateDead, store.StateCancelled}
		p.Limit = 1 + r.rng.IntN(2)
	}
	r.note("bulk %s kinds %v states %v key %q limit %d", p.Op, p.Filter.Kinds, p.Filter.States, p.Filter.UniqueKey, p.Limit)
	r.begin()
	n, err := r.bulk.Bulk(r.ctx, p)
	r.end()
	r.must(err, "bulk")
	changed := 0
	var ends []ended
	for _, j := range r.m.live() {
		if changed == p.Limit {
			break
		}
		if !p.Filter.Matches(j.record()) {
			continue
		}
		applies := false
		switch p.Op {
		case store.BulkRunNow:
			switch st := j.state; {
			case st.Claimable():
				applies = !r.due(j, r.now)
			case st == store.StatePaused:
				applies = true
			case st == store.StateDead || st == store.StateCancelled:
				applies = j.key == "" || r.m.tainted[j.key]
				if !applies {
					h := r.m.holder(j.ident())
					applies = h == nil || h == j
				}
			}
			if applies {
				r.applyControl(j, store.OpRunNow, r.now, nil)
			}
		case store.BulkCancel:
			st := j.state
			applies = st.Claimable() || st == store.StatePaused || (st == store.StateRunning && !j.cancelReq)
			if applies {
				_, e, _ := r.applyControl(j, store.OpCancel, r.now, nil)
				ends = append(ends, e...)
			}
		case store.BulkDelete:
			applies = j.state.Final()
			if applies {
				j.deleted = true
			}
		}
		if applies {
			changed++
			r.touched[j.id] = true
		}
	}
	if n != changed {
		r.failf("bulk %s kinds %v states %v key %q limit %d: model changes %d, store %d", p.Op, p.Filter.Kinds, p.Filter.States, p.Filter.UniqueKey, p.Limit, changed, n)
	}
	r.learnFollowUps(ends)
}

func (r *modelRun) opInsertBatch() {
	p := &store.BatchParams{ID: r.newID()}
	for range 1 + r.rng.IntN(3) {
		c := r.genParams(pick(r, modelKinds))
		p.Children = append(p.Children, c)
	}
	p.Completion = store.InsertParams{ID: r.newID(), Kind: "c", Payload: []byte(`{"batch":1}`), Priority: store.PriorityNormal, MaxAttempts: 1}
	r.note("insert batch %s completion %s children %s", p.ID, p.Completion.ID, describeParams(p.Children))
	r.safeWindows(p.Children)
	r.begin()
	res, err := r.batches.InsertBatch(r.ctx, p)
	r.end()
	r.must(err, "insert batch")
	n := len(r.m.order)
	r.insertRows(p.Children, res.Children, p.ID)
	b := &mbatch{id: p.ID, completion: p.Completion.ID, completionParams: p.Completion, createdAt: r.now}
	for _, id := range r.m.order[n:] {
		b.children = append(b.children, id)
	}
	if len(b.children) == 0 {
		// Every child a duplicate: nothing stored (store.BatchStore).
		r.checkNoBatch(b)
		return
	}
	r.m.batches[b.id] = b
}

// checkNoBatch checks that the store kept neither b nor its completion
// job.
func (r *modelRun) checkNoBatch(b *mbatch) {
	r.t.Helper()
	if _, err := r.batches.Batch(r.ctx, b.id); !errors.Is(err, store.ErrNotFound) {
		r.failf("batch %s of duplicates only: Batch says %v, want ErrNotFound", b.id, err)
	}
	if _, err := r.st.Get(r.ctx, b.completion); !errors.Is(err, store.ErrNotFound) {
		r.failf("batch %s of duplicates only: its completion job %s: %v, want ErrNotFound", b.id, b.completion, err)
	}
}

func (r *modelRun) opCancelBatch() {
	if len(r.m.batches) == 0 {
		return
	}
	ids := keysOf(r.m.batches)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return compareUUID(a, b) })
	b := r.m.batches[pick(r, ids)]
	r.note("cancel batch %s", b.id)
	r.begin()
	n, err := r.batches.CancelBatch(r.ctx, b.id)
	r.end()
	r.must(err, "cancel batch")
	want := 0
	var ends []ended
	for _, id := range b.children {
		j := r.m.jobs[id]
		if j.deleted || j.state.Final() {
			continue
		}
		changed, e, _ := r.applyControl(j, store.OpCancel, r.now, nil)
		if changed {
			want++
			r.touched[id] = true
		}
		ends = append(ends, e...)
	}
	if n != want {
		r.failf("cancel batch %s: model changes %d, store %d", b.id, want, n)
	}
	r.learnFollowUps(ends)
}

func compareUUID(a, b uuid.UUID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
