package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Dead letters grouped by error: an operator facing thousands of dead jobs
// wants "412 × email.send: smtp: 550 mailbox full", over every dead job,
// not over the newest page of them (where one noisy kind hides the rest).

// DeadErrorLineRunes bounds the error line that names a dead group, in
// characters (every database cuts characters the same way).
const DeadErrorLineRunes = 200

// deadLineSpace are the characters trimmed from both ends of an error
// line: ASCII white space but the newline, which ends the line.
const deadLineSpace = " \t\r\v\f"

// DeadErrorLine returns the line that names the dead group of rec: the
// first line of its latest attempt error (up to the first "\n"), with
// ASCII white space trimmed from both ends, cut to DeadErrorLineRunes
// characters; "" when the job has no error or an empty first line. It is
// the reference for what DeadGrouper stores compute.
func DeadErrorLine(rec *JobRecord) string {
	if len(rec.Errors) == 0 {
		return ""
	}
	line, _, _ := strings.Cut(rec.Errors[len(rec.Errors)-1].Error, "\n")
	line = strings.Trim(line, deadLineSpace)
	if utf8.RuneCountInString(line) > DeadErrorLineRunes {
		n := 0
		for i := range line {
			if n == DeadErrorLineRunes {
				line = line[:i]
				break
			}
			n++
		}
	}
	return line
}

// DeadGroup is the dead jobs of one kind whose DeadErrorLine is Error.
type DeadGroup struct {
	// Kind and Error name the group.
	Kind  string `json:"kind"`
	Error string `json:"error"`
	// Count is how many dead jobs are in it.
	Count int64 `json:"count"`
	// Newest is when the latest of them died (FinishedAt, store clock).
	Newest time.Time `json:"newest"`
	// Sample is one of them: the most recently created (largest ID).
	Sample uuid.UUID `json:"sample"`
}

// DeadGroupsParams selects the dead jobs DeadGroups counts.
type DeadGroupsParams struct {
	// Kinds, when not empty, counts only jobs of these kinds.
	Kinds []string
	// ExceptKinds counts no jobs of these kinds.
	ExceptKinds []string
	// DiedAfter, when not zero, counts only jobs that died (FinishedAt)
	// at or after it: "died in the last hour".
	DiedAfter time.Time
	// DiedBefore, when not zero, counts only jobs that died before it.
	DiedBefore time.Time
	// Limit is the most groups returned, 1 to MaxListLimit.
	Limit int
}

// Validate reports, wrapping ErrInvalidParams, the first problem with p.
func (p *DeadGroupsParams) Validate() error {
	if p.Limit < 1 || p.Limit > MaxListLimit {
		return fmt.Errorf("%w: dead groups limit %d not in [1, %d]", ErrInvalidParams, p.Limit, MaxListLimit)
	}
	f := JobFilter{Kinds: p.Kinds, FinishedAfter: p.DiedAfter, FinishedBefore: p.DiedBefore}
	if err := f.Validate(); err != nil {
		return err
	}
	g := JobFilter{Kinds: p.ExceptKinds}
	return g.Validate()
}

// Matches reports whether rec is a dead job p counts.
func (p *DeadGroupsParams) Matches(rec *JobRecord) bool {
	return rec.State == StateDead &&
		(len(p.Kinds) == 0 || contains(p.Kinds, rec.Kind)) && !contains(p.ExceptKinds, rec.Kind) &&
		(p.DiedAfter.IsZero() || !rec.FinishedAt.Before(p.DiedAfter)) &&
		(p.DiedBefore.IsZero() || rec.FinishedAt.Before(p.DiedBefore))
}

// DeadGroupReport is what DeadGroups found.
type DeadGroupReport struct {
	// Groups are the largest groups, at most Limit: by Count, largest
	// first, then by Kind and Error.
	Groups []DeadGroup `json:"groups"`
	// Total is how many groups there are, Groups and the rest.
	Total int `json:"total"`
	// Jobs is how many dead jobs were counted, in every group.
	Jobs int64 `json:"jobs"`
}

// DeadGrouper is implemented by stores that group dead jobs by kind and
// error line (DeadErrorLine) over every dead job, in the store.
type DeadGrouper interface {
	// DeadGroups counts the dead jobs params selects by kind and
	// DeadErrorLine. Invalid params fail with ErrInvalidParams.
	DeadGroups(ctx context.Context, params *DeadGroupsParams) (*DeadGroupReport, error)
}

// CompareDeadGroups orders groups as DeadGroupReport.Groups lists them.
func CompareDeadGroups(a, b DeadGroup) int {
	switch {
	case a.Count != b.Count:
		if a.Count > b.Count {
			return -1
		}
		return 1
	case a.Kind != b.Kind:
		return strings.Compare(a.Kind, b.Kind)
	}
	return strings.Compare(a.Error, b.Error)
}

// GroupDead groups the dead jobs among recs that p selects, as a
// DeadGrouper must: the reference the conformance suite checks stores
// against, and memstore's implementation. Each group's Newest is its
// latest FinishedAt and Sample its greatest ID.
func GroupDead(recs []*JobRecord, p *DeadGroupsParams) *DeadGroupReport {
	type key struct{ kind, line string }
	byKey := map[key]*DeadGroup{}
	rep := &DeadGroupReport{}
	for _, r := range recs {
		if !p.Matches(r) {
			continue
		}
		k := key{r.Kind, DeadErrorLine(r)}
		g := byKey[k]
		if g == nil {
			g = &DeadGroup{Kind: k.kind, Error: k.line}
			byKey[k] = g
		}
		g.Count++
		rep.Jobs++
		if r.FinishedAt.After(g.Newest) {
			g.Newest = r.FinishedAt
		}
		if bytes.Compare(r.ID[:], g.Sample[:]) > 0 {
			g.Sample = r.ID
		}
	}
	for _, g := range byKey {
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, CompareDeadGroups)
	rep.Total = len(rep.Groups)
	rep.Groups = rep.Groups[:min(len(rep.Groups), p.Limit)]
	return rep
}
