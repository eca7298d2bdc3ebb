package store

import (
	"maps"
	"unicode/utf8"
)

// Listings in brief: an operator's list shows many jobs at once, and a job
// may carry a 1 MB payload, a 256 KB result, many 32 KB attempt errors and
// follow-ups holding payloads of their own. Read whole, a page of 1,000
// such jobs is gigabytes in the server that lists them. A listing made
// with ListJobsParams.PreviewBytes reads and returns a bounded part of
// each: the start of the payload and of the result with their sizes, the
// latest attempt error cut, and counts of the rest. The whole job is one
// Get away.

// MaxPreviewBytes bounds ListJobsParams.PreviewBytes.
const MaxPreviewBytes = 64 << 10

// Brief is what a listing in brief (ListJobsParams.PreviewBytes > 0) says
// of a job's large values. Such a record's Payload, Result and FollowUps
// are nil, and its Errors holds only the latest attempt error, its text cut
// to PreviewBytes (CutText). Metadata is whole (at most MaxMetadataSize).
type Brief struct {
	// Payload is the start of the payload's JSON text, as Get returns it,
	// cut to at most PreviewBytes bytes (CutText): not valid JSON when
	// cut. A sealed payload's preview is the start of its envelope.
	Payload string `json:"payload"`
	// PayloadSize is the length of the whole payload, in bytes.
	PayloadSize int `json:"payload_size"`
	// Result is the start of the result, cut as Payload is; empty when
	// the job has none.
	Result string `json:"result,omitempty"`
	// ResultSize is the length of the whole result, in bytes.
	ResultSize int `json:"result_size,omitempty"`
	// Errors is how many attempt errors the job has (the record holds the
	// latest only).
	Errors int `json:"errors,omitempty"`
	// FollowUps is how many follow-ups the job has (the record holds
	// none).
	FollowUps int `json:"follow_ups,omitempty"`
}

// CutText returns the first n bytes of s at most, cut before a UTF-8
// sequence that would not fit whole: the prefix a brief listing keeps of
// a text.
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:max(n, 0)]
	// The last sequence starts at most UTFMax-1 bytes back; drop it when
	// the cut split it.
	for k := len(s) - 1; k >= 0 && k >= len(s)-(utf8.UTFMax-1); k-- {
		if utf8.RuneStart(s[k]) {
			if !utf8.FullRuneInString(s[k:]) {
				s = s[:k]
			}
			break
		}
	}
	return s
}

// BriefRecord returns a copy of rec in brief, as a listing made with
// PreviewBytes n (1 to MaxPreviewBytes) returns it: the reference for
// what each field of Brief holds. rec is not changed.
func BriefRecord(rec *JobRecord, n int) *JobRecord {
	c := *rec
	c.Brief = &Brief{
		Payload: cutBytes(rec.Payload, n), PayloadSize: len(rec.Payload),
		Result: cutBytes(rec.Result, n), ResultSize: len(rec.Result),
		Errors: len(rec.Errors), FollowUps: len(rec.FollowUps),
	}
	c.Payload, c.Result, c.FollowUps = nil, nil, nil
	c.Metadata = maps.Clone(rec.Metadata)
	c.Errors = nil
	if len(rec.Errors) > 0 {
		last := rec.Errors[len(rec.Errors)-1]
		last.Error = CutText(last.Error, n)
		c.Errors = []AttemptError{last}
	}
	return &c
}

// cutBytes is CutText of b, converting only the bytes it keeps.
func cutBytes(b []byte, n int) string {
	if len(b) > n {
		// One byte more than kept, so that CutText sees the cut.
		b = b[:n+1]
	}
	return CutText(string(b), n)
}
