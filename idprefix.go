package ax

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax/store"
)

// Finding jobs by the start of their ID, as an operator copies it from a
// log line, a table or the dashboard ("01a233ed…"). Job IDs are UUIDv7s
// and every store lists jobs in ID order, so the jobs a prefix names are
// one range of that order: one ListJobs call from the range's start finds
// them, however old they are and however many jobs were scheduled since.

// minIDPrefixDigits is the fewest hexadecimal digits FindByIDPrefix takes.
const minIDPrefixDigits = 4

// ErrInvalidIDPrefix is returned by Admin.FindByIDPrefix for a prefix
// that cannot start a job ID: fewer than 4 hexadecimal digits, more than
// 32, or a character that is neither a hexadecimal digit nor a dash.
var ErrInvalidIDPrefix = errors.New("ax: invalid job ID prefix")

// FindByIDPrefix returns the jobs whose IDs start with prefix, in ID order
// (oldest first), at most limit of them: ask for one more than you show
// to tell whether there are more. No match is not an error: the slice is
// then empty. It costs one store.JobInspector.ListJobs call of limit jobs
// whatever the jobs' age.
//
// The prefix is the first hexadecimal digits of a job ID, at least 4,
// upper or lower case, with or without the ID's dashes (so a whole ID is
// a prefix too), as an operator copies it: spaces around it are ignored,
// and so is what follows an ellipsis ("…" or "..."), so a shortened ID
// such as "01a233ed…5bfcf2" is the prefix "01a233ed". limit is 1 to
// store.MaxListLimit (1000); zero means DefaultListLimit.
//
// Errors: ErrInvalidIDPrefix, ErrInvalidOption (limit out of range),
// errors.ErrUnsupported (the store does not implement store.JobInspector),
// or the store's error, wrapped.
func (a *Admin) FindByIDPrefix(ctx context.Context, prefix string, limit int) ([]*JobRecord, error) {
	return a.findByIDPrefix(ctx, prefix, limit, 0)
}

// FindByIDPrefixBrief is FindByIDPrefix with the jobs read and returned
// in brief, as List returns them with ListOptions.PreviewBytes
// previewBytes (1 to store.MaxPreviewBytes; see store.Brief): a page
// that lists the jobs a prefix names (the dashboard's find page) then
// reads a bounded part of each, however large their payloads. Errors are
// FindByIDPrefix's, and ErrInvalidOption for previewBytes out of range.
func (a *Admin) FindByIDPrefixBrief(ctx context.Context, prefix string, limit, previewBytes int) ([]*JobRecord, error) {
	if previewBytes < 1 || previewBytes > store.MaxPreviewBytes {
		return nil, fmt.Errorf("find job ID prefix: %w: preview bytes %d not in [1, %d]", ErrInvalidOption, previewBytes, store.MaxPreviewBytes)
	}
	return a.findByIDPrefix(ctx, prefix, limit, previewBytes)
}

// findByIDPrefix is FindByIDPrefix, listing in brief when previewBytes
// is not zero.
func (a *Admin) findByIDPrefix(ctx context.Context, prefix string, limit, previewBytes int) ([]*JobRecord, error) {
	if err := checkContext(ctx); err != nil {
		return nil, fmt.Errorf("find job ID prefix: %w", err)
	}
	digits, err := idPrefixDigits(prefix)
	if err != nil {
		return nil, fmt.Errorf("find job ID prefix: %w", err)
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > store.MaxListLimit {
		return nil, fmt.Errorf("find job ID prefix %s: %w: limit %d not in [1, %d]", digits, ErrInvalidOption, limit, store.MaxListLimit)
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return nil, unsupported("find job ID prefix "+digits, a.store, "store.JobInspector")
	}
	// The range's lowest ID: the digits, then zeros.
	var low uuid.UUID
	if _, err := hex.Decode(low[:], []byte(digits+strings.Repeat("0", 32-len(digits)))); err != nil {
		return nil, fmt.Errorf("find job ID prefix %s: %w: %v", digits, ErrInvalidIDPrefix, err) // idPrefixDigits checked them
	}
	// After is exclusive: start just below low, at low minus one. For a
	// prefix of zeros low is zero, and a zero After starts at the
	// beginning, which is the range's start.
	after := low
	if low != uuid.Nil {
		for i := len(after) - 1; i >= 0; i-- {
			after[i]--
			if after[i] != 0xff { // no borrow
				break
			}
		}
	}
	page, err := in.ListJobs(ctx, &store.ListJobsParams{Order: store.OldestFirst, After: after, Limit: limit, PreviewBytes: previewBytes})
	if err != nil {
		return nil, fmt.Errorf("find job ID prefix %s: %w", digits, err)
	}
	found := []*JobRecord{} // [] rather than null in JSON
	for _, j := range page.Jobs {
		if strings.HasPrefix(hex.EncodeToString(j.ID[:]), digits) {
			found = append(found, j)
		}
	}
	a.openRecords(found...) // reencrypt.go
	return found, nil
}

// idPrefixDigits returns the hexadecimal digits, in lower case, of a job
// ID prefix as FindByIDPrefix takes it, or an error wrapping
// ErrInvalidIDPrefix.
func idPrefixDigits(prefix string) (string, error) {
	q := strings.ToLower(strings.TrimSpace(prefix))
	q, _, _ = strings.Cut(q, "…")
	q, _, _ = strings.Cut(q, "...")
	digits := strings.ReplaceAll(strings.TrimSpace(q), "-", "")
	if len(digits) < minIDPrefixDigits || len(digits) > 32 || strings.Trim(digits, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: %q is not a job ID nor its first %d or more hexadecimal digits", ErrInvalidIDPrefix, prefix, minIDPrefixDigits)
	}
	return digits, nil
}
