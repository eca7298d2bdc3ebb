package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The operator's view of a store: listing and counting jobs by filter,
// changing many jobs at once, pausing whole kinds, steering periodic
// schedules and reading the leader. Each is an optional interface, found
// by type assertion; memstore and pgstore implement them all.

// JobFilter selects jobs. Every field that is set must match (AND); a zero
// JobFilter matches every job. Slices match any of their values (OR).
type JobFilter struct {
	// IDs selects these jobs.
	IDs []uuid.UUID
	// Kinds selects jobs of these kinds.
	Kinds []string
	// States selects jobs in these states.
	States []State
	// Priorities selects jobs of these priorities.
	Priorities []int
	// RunAfter and RunBefore select jobs whose RunAt is in [RunAfter,
	// RunBefore) (either bound may be zero: open).
	RunAfter, RunBefore time.Time
	// FinishedAfter and FinishedBefore select final jobs whose FinishedAt
	// is in [FinishedAfter, FinishedBefore) (either bound may be zero).
	// Setting either excludes jobs that are not final.
	FinishedAfter, FinishedBefore time.Time
	// UniqueKey selects the jobs with exactly this key.
	UniqueKey string
	// UniqueKeyPrefix selects the jobs whose key starts with it.
	UniqueKeyPrefix string
	// Metadata selects jobs whose metadata holds every key with its value.
	Metadata map[string]string
	// ErrorContains selects jobs with an attempt error containing it
	// (case-sensitive).
	ErrorContains string
	// Node selects jobs whose Owner (the node running, or that last ran,
	// them) is this node.
	Node string
	// Parent selects the jobs whose Parent is this job: what its end
	// inserted (follow-ups, Then jobs), as FollowUpStore.FollowUps lists
	// them whole; a listing with this filter reads them in brief and by
	// page.
	Parent uuid.UUID
}

// IsZero reports whether f matches every job.
func (f *JobFilter) IsZero() bool {
	return len(f.IDs) == 0 && len(f.Kinds) == 0 && len(f.States) == 0 && len(f.Priorities) == 0 &&
		f.RunAfter.IsZero() && f.RunBefore.IsZero() && f.FinishedAfter.IsZero() && f.FinishedBefore.IsZero() &&
		f.UniqueKey == "" && f.UniqueKeyPrefix == "" && len(f.Metadata) == 0 && f.ErrorContains == "" && f.Node == "" &&
		f.Parent == uuid.Nil
}

// MaxFilterValues bounds each list of values of a JobFilter.
const MaxFilterValues = 1000

// Validate reports, wrapping ErrInvalidParams, the first problem with f:
// unknown states or priorities, texts that are not storable (CheckText),
// times (when set) outside MinTime..MaxTime, or more than MaxFilterValues
// values in a list.
func (f *JobFilter) Validate() error {
	if len(f.IDs) > MaxFilterValues || len(f.Kinds) > MaxFilterValues || len(f.States) > MaxFilterValues ||
		len(f.Priorities) > MaxFilterValues || len(f.Metadata) > MaxFilterValues {
		return fmt.Errorf("%w: a filter list has more than %d values", ErrInvalidParams, MaxFilterValues)
	}
	for _, st := range f.States {
		if !st.Valid() {
			return fmt.Errorf("%w: unknown state %q", ErrInvalidParams, st)
		}
	}
	for _, p := range f.Priorities {
		if p < PriorityHigh || p > PriorityLow {
			return fmt.Errorf("%w: priority %d out of range [%d, %d]", ErrInvalidParams, p, PriorityHigh, PriorityLow)
		}
	}
	texts := append([]string{f.UniqueKey, f.UniqueKeyPrefix, f.ErrorContains, f.Node}, f.Kinds...)
	for _, s := range texts {
		if err := CheckText(s, MaxUniqueKeyLength); err != nil {
			return fmt.Errorf("%w: filter text: %w", ErrInvalidParams, err)
		}
	}
	if err := CheckMetadata(f.Metadata); err != nil {
		return fmt.Errorf("%w: filter: %w", ErrInvalidParams, err)
	}
	for _, tm := range []time.Time{f.RunAfter, f.RunBefore, f.FinishedAfter, f.FinishedBefore} {
		if tm.IsZero() {
			continue
		}
		if err := CheckTime(tm); err != nil {
			return fmt.Errorf("%w: filter time: %w", ErrInvalidParams, err)
		}
	}
	return nil
}

// Matches reports whether rec matches f. Stores may use it; it is the
// reference for what each field means.
func (f *JobFilter) Matches(rec *JobRecord) bool {
	switch {
	case len(f.IDs) > 0 && !contains(f.IDs, rec.ID),
		len(f.Kinds) > 0 && !contains(f.Kinds, rec.Kind),
		len(f.States) > 0 && !contains(f.States, rec.State),
		len(f.Priorities) > 0 && !contains(f.Priorities, rec.Priority),
		!f.RunAfter.IsZero() && rec.RunAt.Before(f.RunAfter),
		!f.RunBefore.IsZero() && !rec.RunAt.Before(f.RunBefore),
		(!f.FinishedAfter.IsZero() || !f.FinishedBefore.IsZero()) && !rec.State.Final(),
		!f.FinishedAfter.IsZero() && rec.FinishedAt.Before(f.FinishedAfter),
		!f.FinishedBefore.IsZero() && !rec.FinishedAt.Before(f.FinishedBefore),
		f.UniqueKey != "" && rec.UniqueKey != f.UniqueKey,
		f.UniqueKeyPrefix != "" && !strings.HasPrefix(rec.UniqueKey, f.UniqueKeyPrefix),
		f.Node != "" && rec.Owner != f.Node,
		f.Parent != uuid.Nil && rec.Parent != f.Parent:
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := rec.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if f.ErrorContains != "" {
		for _, e := range rec.Errors {
			if strings.Contains(e.Error, f.ErrorContains) {
				return true
			}
		}
		return false
	}
	return true
}

func contains[T comparable](vs []T, v T) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// ListOrder orders a listing by job ID, which for UUIDv7 IDs is the order
// jobs were created in.
type ListOrder int

const (
	// NewestFirst lists the most recently created jobs first (the
	// default).
	NewestFirst ListOrder = iota
	// OldestFirst lists the oldest jobs first.
	OldestFirst
)

// MaxListLimit is the largest page ListJobs returns.
const MaxListLimit = 1000

// ListJobsParams asks for one page of jobs.
type ListJobsParams struct {
	Filter JobFilter
	Order  ListOrder
	// After, when not zero, is the cursor: the page starts after this job
	// ID in Order (keyset paging: JobPage.Next of the previous page).
	After uuid.UUID
	// Limit is the page size, 1 to MaxListLimit.
	Limit int
	// PreviewBytes, when not zero (1 to MaxPreviewBytes), lists the jobs
	// in brief (BriefRecord): each record carries the first PreviewBytes
	// bytes of its payload and result and their sizes (JobRecord.Brief),
	// only its latest attempt error, cut, and no follow-ups, and the
	// store copies or sends its caller no more of each job than that (a
	// database may still read a value whole to cut it), so a page's size
	// in the caller's memory is bounded whatever the jobs hold.
	PreviewBytes int
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *ListJobsParams) Validate() error {
	if p.Limit < 1 || p.Limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d not in [1, %d]", ErrInvalidParams, p.Limit, MaxListLimit)
	}
	if p.Order != NewestFirst && p.Order != OldestFirst {
		return fmt.Errorf("%w: unknown list order %d", ErrInvalidParams, p.Order)
	}
	if p.PreviewBytes < 0 || p.PreviewBytes > MaxPreviewBytes {
		return fmt.Errorf("%w: preview bytes %d not in [0, %d]", ErrInvalidParams, p.PreviewBytes, MaxPreviewBytes)
	}
	return p.Filter.Validate()
}

// JobPage is one page of a listing.
type JobPage struct {
	// Jobs are the page's jobs, in the requested order.
	Jobs []*JobRecord
	// Next is the cursor of the next page (ListJobsParams.After), or zero
	// when this page is the last.
	Next uuid.UUID
}

// JobInspector is implemented by stores that list and count jobs for
// operators. Listings read committed data without taking locks that claims
// wait for, and each statement runs under a bounded time, so listing never
// holds up the scheduler.
type JobInspector interface {
	// ListJobs returns the page of jobs matching params.Filter that
	// follows params.After, in params.Order. Jobs finished long ago are
	// listed until they are pruned. With params.PreviewBytes the records
	// are in brief, as BriefRecord makes them, and the store hands over
	// no more of each job than they hold. Invalid params fail with
	// ErrInvalidParams.
	ListJobs(ctx context.Context, params *ListJobsParams) (*JobPage, error)

	// CountMatching returns how many jobs match f, exactly.
	CountMatching(ctx context.Context, f *JobFilter) (int64, error)
}

// BulkOp is an operation applied to many jobs by Bulk.
type BulkOp int

const (
	// BulkRunNow makes matching paused, dead and cancelled jobs, and
	// scheduled and retrying jobs not yet due, due now, as ControlOp
	// OpRunNow does for one job (dead and cancelled ones keep their
	// errors and their attempts are numbered on). Others are left alone: running and
	// succeeded jobs, scheduled and retrying jobs already due (run_at at
	// or before store now: there is nothing to make due), and dead and
	// cancelled jobs whose unique key another job holds meanwhile (see
	// OpRunNow). Since a changed
	// job is then due, it is left alone by the next call, so repeated
	// calls drain.
	BulkRunNow BulkOp = iota + 1
	// BulkCancel cancels matching jobs as OpCancel does: scheduled,
	// retrying and paused ones at once (to cancelled); running ones whose
	// cancel was not yet requested are asked to stop (CancelRequested:
	// the owner learns it at its next lease extension). Others are left
	// alone, running jobs already asked to stop included, so repeated
	// calls drain.
	BulkCancel
	// BulkDelete deletes matching final jobs (succeeded, dead,
	// cancelled), freeing the unique keys they held. Others are left
	// alone.
	BulkDelete
)

// String returns the operation's name.
func (op BulkOp) String() string {
	switch op {
	case BulkRunNow:
		return "run-now"
	case BulkCancel:
		return "cancel"
	case BulkDelete:
		return "delete"
	}
	return fmt.Sprintf("BulkOp(%d)", int(op))
}

// MaxBulkLimit is the most jobs one Bulk call changes.
const MaxBulkLimit = 10000

// BulkParams applies Op to at most Limit jobs matching Filter.
type BulkParams struct {
	Filter JobFilter
	Op     BulkOp
	// Limit bounds the jobs changed by this call (1 to MaxBulkLimit), so
	// that one transaction stays short; call again until fewer than Limit
	// changed.
	Limit int
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *BulkParams) Validate() error {
	if p.Op < BulkRunNow || p.Op > BulkDelete {
		return fmt.Errorf("%w: unknown bulk operation %s", ErrInvalidParams, p.Op)
	}
	if p.Limit < 1 || p.Limit > MaxBulkLimit {
		return fmt.Errorf("%w: bulk limit %d not in [1, %d]", ErrInvalidParams, p.Limit, MaxBulkLimit)
	}
	return p.Filter.Validate()
}

// BulkController is implemented by stores that change many jobs by filter.
type BulkController interface {
	// Bulk applies params.Op to at most params.Limit jobs matching
	// params.Filter to which the operation applies, in one atomic
	// operation, oldest first, skipping rows other transactions hold, and
	// returns how many it changed. Jobs made due notify listeners.
	Bulk(ctx context.Context, params *BulkParams) (int, error)
}

// KindState is the operator's state of one job kind.
type KindState struct {
	// Kind names the kind.
	Kind string `json:"kind"`
	// Paused reports that no host claims jobs of the kind.
	Paused bool `json:"paused"`
	// UpdatedAt is when the state last changed (store clock).
	UpdatedAt time.Time `json:"updated_at"`
}

// KindPauser is implemented by stores that persist the pause of whole
// kinds, cluster-wide. Pausing a kind stops new claims of it: each host
// reads the paused kinds at every heartbeat and leaves them out of its
// claims, so no new attempt starts later than one heartbeat after the
// pause; running attempts finish and nothing is lost. A pause and a
// resume notify listeners (a re-check, empty-kind notification), so the
// hosts that hear it re-read the paused kinds at once: a paused kind
// stops starting there as soon as the notification arrives, a resumed one
// is claimed at once.
type KindPauser interface {
	// SetKindPaused pauses (paused = true) or resumes a kind and returns
	// its state afterwards. Only a pause is stored: a resume deletes the
	// kind's state (and returns UpdatedAt = the resume's store time), so
	// kinds paused and resumed leave nothing behind. Pausing a paused
	// kind changes nothing (UpdatedAt included); resuming a kind that is
	// not paused stores nothing and returns a zero UpdatedAt. A kind
	// needs no jobs to be paused. A pause or resume that changed the
	// state notifies listeners with an empty-kind Notification. An empty kind,
	// or one that is not a storable text (CheckText) of at most
	// MaxKindLength bytes, fails with ErrInvalidParams.
	SetKindPaused(ctx context.Context, kind string, paused bool) (*KindState, error)

	// KindStates returns the paused kinds' states, ordered by kind.
	KindStates(ctx context.Context) ([]KindState, error)
}

// PeriodicController is implemented by periodic stores whose schedules an
// operator can list and pause. A paused schedule fires no jobs: its ticks
// are recorded as passed without a job, so resuming it starts at the next
// tick, with no catch-up.
type PeriodicController interface {
	// ListPeriodic returns every stored schedule's state, ordered by name.
	ListPeriodic(ctx context.Context) ([]PeriodicState, error)

	// SetPeriodicPaused pauses or resumes the schedule name and returns its
	// state afterwards, or ErrNotFound.
	SetPeriodicPaused(ctx context.Context, name string, paused bool) (*PeriodicState, error)
}

// LeaderReader is implemented by Leasers that tell who holds a leadership
// without taking part in the election (for operators and tools).
type LeaderReader interface {
	// Leader returns the named lease as it is now, compared with store
	// now: Held reports that somebody holds it, and then Holder names the
	// holder and ExpiresAt is when the lease lapses unless renewed; when
	// nobody holds it (never held, expired or released) Holder is empty
	// and ExpiresAt zero. Term is the latest term (zero when never held).
	// A name that is not a storable text (CheckText, at most
	// MaxKindLength bytes) fails with ErrInvalidParams.
	Leader(ctx context.Context, name string) (*Leadership, error)
}

// KindDue is the oldest due job of one kind that no host has started.
type KindDue struct {
	// Kind names the kind.
	Kind string `json:"kind"`
	// OldestRunAt is the earliest run_at among the kind's claimable
	// (scheduled or retrying) jobs due at DueReport.Now (store clock).
	OldestRunAt time.Time `json:"oldest_run_at"`
}

// DueReport is what DueInspector.OldestDue found.
type DueReport struct {
	// Now is the store's clock at the call: Now minus OldestRunAt is how
	// long the oldest due job of a kind has waited.
	Now time.Time `json:"now"`
	// Kinds lists, ordered by kind, the kinds with at least one due
	// claimable job; kinds without are absent.
	Kinds []KindDue `json:"kinds"`
}

// DueInspector is implemented by stores that tell, per kind, how long the
// oldest due but unstarted job has waited: the signal a stalled kind (no
// host handles it, every host is full, or the kind is paused) gives before
// any of its jobs starts late. The call must stay cheap with a large
// backlog (an index probe per kind, not a scan of every due job), since
// metrics collectors make it at every scrape.
type DueInspector interface {
	// OldestDue returns, per kind, the earliest run_at among its
	// scheduled and retrying jobs due at store now. Paused jobs are not
	// counted (an operator holds them), nor running ones.
	OldestDue(ctx context.Context) (*DueReport, error)
}

// MaxNonceLength is the longest nonce a NonceKeeper remembers, in bytes.
const MaxNonceLength = 512

// NonceKeeper is implemented by stores that remember request nonces for a
// while, shared by every process on the store: the HTTP API refuses a
// signed request whose nonce was seen within its timestamp window, on
// whichever server it arrives.
type NonceKeeper interface {
	// RememberNonce records nonce (a non-empty text of at most
	// MaxNonceLength bytes) until expiresAt, in one atomic operation, and
	// reports whether it was new: false when the same nonce is recorded
	// and not yet expired (store clock). Expired nonces are forgotten
	// (the store may delete them lazily).
	RememberNonce(ctx context.Context, nonce string, expiresAt time.Time) (fresh bool, err error)
}
