package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/axsched/ax"
)

// Job IDs on the command line (jobs show, retry, cancel, delete) are
// whole IDs or their first digits, as an operator copies them from a
// table, a log line or the dashboard ("01a233ed…"): at least 4
// hexadecimal digits, with or without the dashes. A prefix must name
// exactly one job. ax.Admin.FindByIDPrefix finds the jobs a prefix names
// (one range of the ID order, so however old they are), as the
// dashboard's /find does.

// maxCandidates bounds the jobs an ambiguous prefix's error lists.
const maxCandidates = 10

// errAmbiguousID is the error of an ID prefix several jobs' IDs start
// with: a usage error (exit code 2).
var errAmbiguousID = errors.New("ambiguous job ID prefix")

// resolvePrefix returns the one job whose ID starts with prefix. A
// malformed prefix is a usage error; none is an error wrapping
// ax.ErrNotFound; several, an error wrapping errAmbiguousID that lists
// them.
func resolvePrefix(e *env, a *ax.Admin, prefix string) (uuid.UUID, error) {
	found, err := a.FindByIDPrefix(e.ctx, prefix, maxCandidates+1)
	switch {
	case errors.Is(err, ax.ErrInvalidIDPrefix):
		return uuid.Nil, usageErrorf("%q is not a job ID, nor its first 4 or more hexadecimal digits", prefix)
	case err != nil:
		return uuid.Nil, err
	case len(found) == 0:
		return uuid.Nil, fmt.Errorf("no job's ID starts with %s: %w", prefix, ax.ErrNotFound)
	case len(found) == 1:
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
// resolved through a.
func jobIDs(e *env, a *ax.Admin, args []string) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	for _, s := range args {
		id, err := uuid.Parse(s)
		if err != nil {
			if id, err = resolvePrefix(e, a, s); err != nil {
				return nil, err
			}
		}
		ids = append(ids, id)
	}
	return ids, nil
}
