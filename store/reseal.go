package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// ResealParams rewrites the sealed values of one job (ax's encryption at
// rest, when its key ring's current key changed): its payload, result,
// metadata and follow-up templates, but only while its payload and result
// are still OldPayload and OldResult, byte for byte, so that a result
// written by an attempt that ended meanwhile, or another re-seal, is never
// overwritten. Nothing else of the job changes, whatever its state.
type ResealParams struct {
	ID uuid.UUID
	// OldPayload and OldResult are the values the job must still hold
	// (OldResult nil: the job has no result).
	OldPayload, OldResult json.RawMessage
	// Payload replaces the payload (required).
	Payload json.RawMessage
	// Result replaces the result when OldResult is not nil.
	Result json.RawMessage
	// Metadata replaces the metadata when not nil.
	Metadata map[string]string
	// FollowUps replaces the follow-up templates when not nil.
	FollowUps []FollowUp
}

// Validate reports, wrapping ErrInvalidParams, a row no store can write.
func (p *ResealParams) Validate() error {
	switch {
	case p.ID == uuid.Nil:
		return fmt.Errorf("%w: reseal: job ID is not set", ErrInvalidParams)
	case len(p.Payload) == 0 || len(p.OldPayload) == 0:
		return fmt.Errorf("%w: reseal %s: payload not set", ErrInvalidParams, p.ID)
	case len(p.Payload) > MaxPayloadSize:
		return fmt.Errorf("%w: reseal %s: payload of %d bytes", ErrInvalidParams, p.ID, len(p.Payload))
	case (p.OldResult == nil) != (p.Result == nil):
		return fmt.Errorf("%w: reseal %s: Result and OldResult must be set together", ErrInvalidParams, p.ID)
	case len(p.Result) > MaxResultSize:
		return fmt.Errorf("%w: reseal %s: result of %d bytes", ErrInvalidParams, p.ID, len(p.Result))
	}
	if err := CheckMetadata(p.Metadata); err != nil {
		return fmt.Errorf("%w: reseal %s: %w", ErrInvalidParams, p.ID, err)
	}
	return nil
}

// Resealer is implemented by stores that can rewrite jobs' sealed values
// in place (memstore, pgstore, sqlitestore), for ax's Admin.Reencrypt.
type Resealer interface {
	// Reseal applies each row whose job still holds its OldPayload and
	// OldResult, and reports, per row, whether it applied (false: the job
	// changed meanwhile or is gone). Rows apply independently.
	Reseal(ctx context.Context, rows []ResealParams) ([]bool, error)
}
