// Package ax is an embeddable job scheduler for Go services.
//
// A service imports ax, registers a handler per job kind, and schedules jobs
// from its business logic. Every process that runs a Scheduler is both
// scheduler and worker; processes coordinate only through a shared Store
// (store/pgstore on PostgreSQL in production, store/memstore in one
// process). There is no scheduler server to run.
//
//	s, _ := ax.New(ax.Config{Store: st, Logger: logger})
//	ax.Handle(s, "email.send", func(ctx context.Context, j *ax.Job, p EmailArgs) error {
//		return mailer.Send(ctx, p.To, p.Body)
//	}, ax.Timeout(30*time.Second), ax.MaxAttempts(8))
//	s.Start(ctx)
//	defer func() {
//		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//		defer cancel()
//		s.Stop(ctx) // finish running jobs for up to 30s, hand back the rest
//	}()
//	res, err := s.Schedule(ctx, "email.send", EmailArgs{...}, ax.In(10*time.Minute), ax.UniqueKey("welcome:"+userID))
//
// # Typed jobs
//
// A payload type with a Kind method (JobArgs) names its own kind, so a
// kind is never spelt twice: HandleArgs registers its handler, and every
// call that takes a kind string has a form that takes the value instead —
// Enqueue, EnqueueMany, EnqueueTx and EnqueueManyTx (in the caller's
// transaction), NewRequest (an entry of ScheduleMany, ScheduleManyTx or a
// Batch), ThenArgs, FollowUpArgs and EveryArgs. A type may state its
// jobs' default options (JobArgsWithOptions: attempts, priority, a unique
// key from its fields...); options given at the call win.
//
// # Guarantees
//
// A job exists once Schedule returns: it lives in the Store, never only in
// memory. Delivery is at least once: a job runs again only after a crash,
// a lost lease or a stop that ran out of time, never twice in normal
// operation, so handlers should be idempotent. Due-ness is decided by the
// store's clock, so a host whose clock jumps cannot start jobs early. Claims
// are batched and fenced by lease tokens: a host that lost a job's lease
// cannot write its result, and its handler's context is cancelled. A dead
// host's jobs run elsewhere at most LeaseDuration + 1.2 × RescueInterval
// after its last heartbeat, whichever host died.
//
// # Input
//
// Bad input gets an error matched with errors.Is (ErrInvalidKind,
// ErrInvalidOption, ErrInvalidPayload, ErrInvalidConfig) and stores
// nothing. The limits are the same for every store (see package store):
// texts are valid UTF-8 without NUL bytes; kinds and node names 1 to 255
// bytes, unique keys at most 1,024, metadata at most 64 KiB, payloads at
// most 1 MiB of JSON, kept byte for byte; run times between 1970 and 9999.
//
// # States
//
// A job moves through the states documented on store.State:
//
//	scheduled ──claim──▶ running ──ok──▶ succeeded
//	    ▲                   │ error, attempts left ──▶ retrying ──claim──▶ running
//	    │                   │ error, none left / permanent ──▶ dead
//	    │                   │ lease expired (owner died) ──▶ retrying or dead
//	    │                   │ snooze(d), or handed back at Stop ──▶ scheduled
//	    └── resume ── paused ◀── pause ── scheduled | retrying
//	scheduled | retrying | paused ──cancel──▶ cancelled; running ──cancel──▶ handler cancelled ──▶ cancelled
//	running ──pause──▶ the attempt runs to its end ──▶ paused (or succeeded, dead)
//
// # Timing
//
// Each Scheduler keeps the due times it learns (from each claim, which
// reports the next due time, and from store notifications) in a
// hierarchical timing wheel and claims exactly when they fall due, so a job
// scheduled for 10:00:00.000 starts within milliseconds of it instead of at
// the next poll. A slow fallback poll (Config.PollInterval) covers lost
// notifications.
//
// # Operating a cluster
//
// Admin (NewAdmin on the cluster's store, or Scheduler.Admin) is the
// operator's API, and the ax command (cmd/ax) its shell: list and count
// jobs by filter (kind, state, priority, unique key, metadata, error
// text, node, run and finish times) with keyset cursors; retry, cancel or
// delete them in bulk; pause a kind across the cluster (no host starts
// its jobs within one HeartbeatInterval; running ones finish); pause,
// resume or trigger periodic schedules; read nodes, the maintenance
// leader and the queue, without running a Scheduler.
//
// A job of a kind no host handles waits, scheduled, until one does: for
// a misspelt kind, forever. Once its jobs have been due for
// Config.UnhandledKindGrace (5 minutes) with no running node handling the
// kind (and none that left within that time, and the cluster older than
// that), the leader logs one warning per kind and emits
// EventKindUnhandled, and Admin.Kinds, Stats, axprom's ax_kind_unhandled,
// the dashboard and `ax kinds list` mark it unhandled. With
// Config.RefuseUnknownKinds, Schedule refuses a kind no node of the
// cluster lists with ErrUnknownKind, at no store call per Schedule.
//
// # Flow control
//
// Limits that hold for the whole cluster, applied by the store where jobs
// start, end and arrive (store.FlowStore: memstore, sqlitestore and pgstore), declared
// as handler options by the hosts that handle the kind (the last host to
// start decides): GlobalConcurrency (running jobs, all hosts together),
// PartitionBy (per tenant, customer..., from a metadata key or a payload
// field: concurrency and rate per partition), RateLimit (at most n starts
// in any window), CircuitBreaker (no start while a failing downstream
// cools down, one probe, then back), PartitionBreaker (the same, per
// partition: one failing tenant stops only its own jobs), and MaxPending (Schedule returns
// ErrBackpressure, or waits with WaitForCapacity). Jobs held back wait as
// they are, attempts untouched, and start as soon as they may: hosts wake
// when the store says (the next rate token, a breaker's cool-down, a
// running job's end), without polling. Sequential runs the jobs of a key
// one at a time in scheduled order; Config.PriorityAging keeps a flood of
// High jobs from starving Low ones (a job due for a minute goes first).
//
// # Failures
//
// A handler's error retries the job after a delay from its RetryPolicy (by
// default exponential backoff with full jitter, see ExponentialBackoff),
// until MaxAttempts, then the job is dead: kept for inspection and retried
// by hand with RunNow. Permanent (or wrapping ErrSkipRetry) skips the
// retries; Snooze reschedules without using an attempt; panics are recovered
// and recorded with their stack.
//
// A kind's handler options hold whoever schedules its jobs: the host that
// runs an attempt applies its kind's Timeout and RetryPolicy, and the
// hosts that handle a kind store its MaxAttempts and Priority at Start
// (store.KindDefaulter), so a job scheduled where the kind has no handler
// (ax serve, the HTTP API) gets them too. A job's own MaxAttempts or
// Priority option wins; jobs keep what they got when they were scheduled.
package ax
