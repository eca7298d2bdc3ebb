package store

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits every Store enforces, so that whatever one store accepts, every
// other can keep: text is valid UTF-8 without NUL bytes (PostgreSQL refuses
// both), sizes fit an index entry, numbers fit 32 bits, and times fit every
// database's timestamp range.
const (
	// MaxPayloadSize is the largest payload, in bytes. Larger payloads
	// belong in blob storage, with a reference in the job.
	MaxPayloadSize = 1 << 20

	// MaxKindLength is the longest job kind, in bytes. Node and periodic
	// schedule names share it.
	MaxKindLength = 255

	// MaxUniqueKeyLength is the longest unique key, in bytes (an index
	// entry must hold it).
	MaxUniqueKeyLength = 1024

	// MaxMetadataSize bounds a job's metadata: the sum of its keys' and
	// values' lengths, in bytes.
	MaxMetadataSize = 64 << 10

	// MaxErrorLength is the longest attempt error text a Store keeps, in
	// bytes. Writers truncate longer texts (the scheduler keeps the head,
	// where the message and the top of a panic's stack are).
	MaxErrorLength = 32 << 10

	// MaxAttemptsLimit is the largest MaxAttempts (a 32-bit integer in
	// every database).
	MaxAttemptsLimit = math.MaxInt32
)

// MinTime and MaxTime bound the times a Store accepts (RunAt): from the
// Unix epoch to the end of the year 9999, which every supported database
// and RFC 3339 can represent. (The lower bound is not the year 1: that is
// the zero time.Time, which means "no time" in InsertParams.RunAt. A run
// time before 1970 is a bug, not a plan.)
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// CheckText reports why s cannot be stored as a text of at most max bytes
// (max <= 0: no bound), or nil: it must be valid UTF-8 without NUL bytes.
// The error does not wrap ErrInvalidParams, so that callers can wrap their
// own sentinel.
func CheckText(s string, max int) error {
	switch {
	case max > 0 && len(s) > max:
		return fmt.Errorf("%d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("contains a NUL byte")
	}
	return nil
}

// CheckTime reports why t is outside [MinTime, MaxTime], or nil.
func CheckTime(t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return fmt.Errorf("%s is outside 1970 to 9999", t.UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckMetadata reports why md cannot be stored, or nil: keys are
// non-empty, keys and values are texts (CheckText), and their total
// length is at most MaxMetadataSize.
func CheckMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		if k == "" {
			return fmt.Errorf("empty metadata key")
		}
		if err := CheckText(k, 0); err != nil {
			return fmt.Errorf("metadata key %q: %w", k, err)
		}
		if err := CheckText(v, 0); err != nil {
			return fmt.Errorf("metadata %q value: %w", k, err)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataSize {
		return fmt.Errorf("metadata is %d bytes, more than %d", total, MaxMetadataSize)
	}
	return nil
}

// TruncateText returns s as a storable text of at most max bytes: invalid
// UTF-8 sequences become U+FFFD, NUL bytes are dropped, and a longer text
// is cut at a rune boundary, ending with a note of how much was cut when
// max leaves room for one. Writers use it for texts they do not control,
// such as error messages.
func TruncateText(s string, max int) string {
	if CheckText(s, max) == nil {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if max <= 0 || len(s) <= max {
		return s
	}
	noteRoom := len(fmt.Sprintf("… [%d bytes cut]", len(s))) // the longest note
	withNote := max > noteRoom
	cut := max
	if withNote {
		cut -= noteRoom
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if !withNote {
		return s[:cut]
	}
	return s[:cut] + fmt.Sprintf("… [%d bytes cut]", len(s)-cut)
}
