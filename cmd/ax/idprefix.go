package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Job IDs on the command line (jobs show, retry, cancel, delete) are
// whole IDs or their first digits, as an operator copies them from a
// table, a log line or the dashboard ("01a233ed…"): at least
// minIDPrefix hexadecimal digits, with or without the dashes. A prefix
// must name exactly one job. IDs are UUIDv7s and listings are ordered by
// ID, so the jobs a prefix names are one range of the ID order: one
// ListJobs call (the store call of Admin.List) from the range's start
// finds them however old they are, where the dashboard's /find matches
// among the newest jobs only.

// minIDPrefix is the fewest hexadecimal digits a prefix must have.
const minIDPrefix = 4

// maxCandidates bounds the jobs an ambiguous prefix's error lists.
const maxCandidates = 10

// errAmbiguousID is the error of an ID prefix several jobs' IDs start
// with: a usage error (exit code 2).
var errAmbiguousID = errors.New("ambiguous job ID prefix")

// idArgs splits job ID arguments into whole IDs and prefixes (their
// hexadecimal digits, dashes taken out), and refuses anything else.
func idArgs(args []string) (ids []uuid.UUID, prefixes []string, err error) {
	for _, s := range args {
		if id, err := uuid.Parse(s); err == nil {
			ids = append(ids, id)
			continue
		}
		q := strings.TrimRight(strings.SplitN(strings.ToLower(strings.TrimSpace(s)), "…", 2)[0], ".")
		digits := strings.ReplaceAll(q, "-", "")
		if _, herr := hex.DecodeString(digits + strings.Repeat("0", len(digits)%2)); herr != nil ||
			len(digits) < minIDPrefix || len(digits) >= 32 {
			return nil, nil, usageErrorf("%q is not a job ID, nor its first %d or more hexadecimal digits", s, minIDPrefix)
		}
		prefixes = append(prefixes, digits)
	}
	return ids, prefixes, nil
}

// resolvePrefix returns the one job whose ID starts with the hexadecimal
// digits prefix. None is an error wrapping ax.ErrNotFound; several, an
// error wrapping errAmbiguousID that lists them.
func resolvePrefix(e *env, in store.JobInspector, prefix string) (uuid.UUID, error) {
	var low uuid.UUID
	if _, err := hex.Decode(low[:], []byte(prefix+strings.Repeat("0", 32-len(prefix)))); err != nil {
		return uuid.Nil, usageErrorf("job ID prefix %q: %v", prefix, err)
	}
	// After is exclusive: start just below the range's lowest ID, low
	// minus one. For a prefix of zeros low is zero, and a zero After
	// starts at the beginning, which is the range's start.
	after := low
	if low != uuid.Nil {
		for i := len(after) - 1; i >= 0; i-- {
			after[i]--
			if after[i] != 0xff { // no borrow
				break
			}
		}
	}
	page, err := in.ListJobs(e.ctx, &store.ListJobsParams{Order: store.OldestFirst, After: after, Limit: maxCandidates + 1})
	if err != nil {
		return uuid.Nil, fmt.Errorf("find job ID prefix %s: %w", prefix, err)
	}
	var found []*store.JobRecord
	for _, j := range page.Jobs {
		if strings.HasPrefix(hex.EncodeToString(j.ID[:]), prefix) {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		return uuid.Nil, fmt.Errorf("no job's ID starts with %s: %w", prefix, ax.ErrNotFound)
	case 1:
		return found[0].ID, nil
	}
	var b strings.Builder
	more := ""
	if len(found) > maxCandidates {
		found, more = found[:maxCandidates], "more than "
	}
	fmt.Fprintf(&b, "%s: the IDs of %s%d jobs start with %s (give more digits):", errAmbiguousID, more, len(found), prefix)
	for _, j := range found {
		fmt.Fprintf(&b, "\n  %s  %s  %s", j.ID, j.Kind, j.State)
	}
	return uuid.Nil, usageError{ambiguousError{msg: b.String()}}
}

// ambiguousError carries the candidates' list and matches errAmbiguousID.
type ambiguousError struct{ msg string }

func (e ambiguousError) Error() string        { return e.msg }
func (e ambiguousError) Is(target error) bool { return target == errAmbiguousID }

// jobIDs returns the jobs args name: whole IDs as they are, prefixes
// resolved on the store st.
func jobIDs(e *env, st store.Store, args []string) ([]uuid.UUID, error) {
	ids, prefixes, err := idArgs(args)
	if err != nil || len(prefixes) == 0 {
		return ids, err
	}
	in, ok := st.(store.JobInspector)
	if !ok {
		return nil, fmt.Errorf("find job ID prefixes: %w: the store cannot list jobs (give whole IDs)", errors.ErrUnsupported)
	}
	for _, p := range prefixes {
		id, err := resolvePrefix(e, in, p)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}
