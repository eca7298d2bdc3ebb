package ax

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// JobFilter selects jobs for Admin.List, Count and the bulk methods; see
// store.JobFilter for each field. Every field that is set must match; a
// zero JobFilter matches every job; a list matches any of its values.
type JobFilter = store.JobFilter

// ListOrder orders a listing by job ID, which for AX's UUIDv7 IDs is the
// order jobs were scheduled in.
type ListOrder = store.ListOrder

// List orders.
const (
	// NewestFirst lists the most recently scheduled jobs first (the
	// default).
	NewestFirst = store.NewestFirst
	// OldestFirst lists the oldest jobs first.
	OldestFirst = store.OldestFirst
)

// DefaultListLimit is the page size of Admin.List when ListOptions.Limit
// is zero.
const DefaultListLimit = 100

// ListOptions asks Admin.List for one page of jobs.
type ListOptions struct {
	// Filter selects the jobs.
	Filter JobFilter
	// Order orders them; defaults to NewestFirst.
	Order ListOrder
	// Cursor, when not empty, continues a listing: it is the
	// JobList.Cursor of the previous page, made with the same Order
	// (and, to page through one selection, the same Filter).
	Cursor string
	// Limit is the page size, 1 to store.MaxListLimit (1000). Defaults to
	// DefaultListLimit.
	Limit int
	// PreviewBytes, when not zero (1 to store.MaxPreviewBytes), lists
	// the jobs in brief: each record carries the first PreviewBytes
	// bytes of its payload and result and their sizes in
	// JobRecord.Brief instead of the values, its latest attempt error
	// only, cut, and no follow-ups (see store.Brief), and the store hands
	// over no more of each job than that. A sealed value whose whole
	// envelope fits in the preview is opened (with the Admin's ring), its
	// size then the plain value's; a longer one's preview is the start of
	// its envelope (it cannot be opened cut). Get reads a job whole.
	PreviewBytes int
}

// JobList is one page of jobs.
type JobList struct {
	// Jobs are the page's jobs, in the requested order.
	Jobs []*JobRecord `json:"jobs"`
	// Cursor continues the listing (ListOptions.Cursor); empty when this
	// page is the last.
	Cursor string `json:"cursor,omitempty"`
}

// List returns one page of the jobs opts.Filter selects, in opts.Order,
// continuing from opts.Cursor. Paging is by keyset (job ID), so a page is
// cheap however deep the listing goes, and jobs scheduled while paging
// appear at the end of an oldest-first listing and not at all in a
// newest-first one; none is listed twice.
//
// Errors: ErrInvalidFilter, ErrInvalidCursor, ErrInvalidOption (limit or
// order out of range), errors.ErrUnsupported (the store does not implement
// store.JobInspector), or the store's error, wrapped.
func (a *Admin) List(ctx context.Context, opts ListOptions) (*JobList, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return nil, unsupported("list jobs", a.store, "store.JobInspector")
	}
	if opts.Limit == 0 {
		opts.Limit = DefaultListLimit
	}
	if opts.Limit < 1 || opts.Limit > store.MaxListLimit {
		return nil, fmt.Errorf("list jobs: %w: limit %d not in [1, %d]", ErrInvalidOption, opts.Limit, store.MaxListLimit)
	}
	if opts.Order != NewestFirst && opts.Order != OldestFirst {
		return nil, fmt.Errorf("list jobs: %w: unknown order %d", ErrInvalidOption, opts.Order)
	}
	if opts.PreviewBytes < 0 || opts.PreviewBytes > store.MaxPreviewBytes {
		return nil, fmt.Errorf("list jobs: %w: preview bytes %d not in [0, %d]", ErrInvalidOption, opts.PreviewBytes, store.MaxPreviewBytes)
	}
	if err := checkFilter(&opts.Filter); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	after, err := decodeCursor(opts.Cursor, opts.Order)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	page, err := in.ListJobs(ctx, &store.ListJobsParams{Filter: opts.Filter, Order: opts.Order, After: after, Limit: opts.Limit, PreviewBytes: opts.PreviewBytes})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	a.openRecords(page.Jobs...) // reencrypt.go
	out := &JobList{Jobs: page.Jobs}
	if out.Jobs == nil {
		out.Jobs = []*JobRecord{} // [] rather than null in JSON
	}
	if page.Next != uuid.Nil {
		out.Cursor = encodeCursor(page.Next, opts.Order)
	}
	return out, nil
}

// Count returns how many jobs f selects, exactly. Errors as for List.
func (a *Admin) Count(ctx context.Context, f JobFilter) (int64, error) {
	if err := checkContext(ctx); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return 0, unsupported("count jobs", a.store, "store.JobInspector")
	}
	if err := checkFilter(&f); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	n, err := in.CountMatching(ctx, &f)
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// Get returns the job with id, or an error wrapping ErrNotFound.
func (a *Admin) Get(ctx context.Context, id uuid.UUID) (*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	rec, err := a.store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	a.openRecords(rec) // reencrypt.go
	return rec, nil
}

// checkFilter validates f as every store will, and reports a problem as
// ErrInvalidFilter.
func checkFilter(f *JobFilter) error {
	if err := f.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), store.ErrInvalidParams.Error()+": ")
		return fmt.Errorf("%w: %s", ErrInvalidFilter, msg)
	}
	return nil
}

// Cursors are opaque to callers: base64url (unpadded) of a version byte
// that also carries the order, then the 16 bytes of the last listed job's
// ID. Carrying the order lets a cursor used with the other order be
// refused instead of silently skipping or repeating jobs.
const cursorVersion = 1

func encodeCursor(after uuid.UUID, order ListOrder) string {
	var b [17]byte
	b[0] = cursorVersion<<4 | byte(order)
	copy(b[1:], after[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeCursor returns the ID a cursor made for order continues after, or
// uuid.Nil for an empty cursor.
func decodeCursor(cursor string, order ListOrder) (uuid.UUID, error) {
	if cursor == "" {
		return uuid.Nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) != 17 || b[0]>>4 != cursorVersion {
		return uuid.Nil, fmt.Errorf("%w: %q is not a cursor returned by a listing", ErrInvalidCursor, cursor)
	}
	if got := ListOrder(b[0] & 0x0f); got != order {
		return uuid.Nil, fmt.Errorf("%w: the cursor continues a %s listing, not a %s one", ErrInvalidCursor, orderName(got), orderName(order))
	}
	id, err := uuid.FromBytes(b[1:])
	if err != nil || id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("%w: %q is not a cursor returned by a listing", ErrInvalidCursor, cursor)
	}
	return id, nil
}

func orderName(o ListOrder) string {
	switch o {
	case NewestFirst:
		return "newest-first"
	case OldestFirst:
		return "oldest-first"
	}
	return fmt.Sprintf("order-%d", int(o))
}
