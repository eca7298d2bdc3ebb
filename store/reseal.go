package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

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

// PendingCompletion is the completion job of a batch whose children have
// not all ended: the store holds it as a template (BatchParams.Completion)
// until the last child ends, and then inserts it. Its sealed values are
// rewritten, while it waits, with ResealCompletions.
type PendingCompletion struct {
	// Batch is the batch's ID.
	Batch uuid.UUID
	// Job is the completion job's template, its ID included.
	Job InsertParams
}

// CompletionResealParams rewrites the sealed values of one batch's pending
// completion template: its payload, metadata and follow-up templates, but
// only while the batch has not completed and the template still holds
// the values it was read with (Holds), so that a template inserted as a
// job meanwhile, or re-sealed by another pass, is never written. Nothing
// else of the template or the batch changes.
type CompletionResealParams struct {
	// Batch names the batch.
	Batch uuid.UUID
	// OldPayload, OldMetadata and OldFollowUps are the template's values
	// as PendingCompletions returned them.
	OldPayload   json.RawMessage
	OldMetadata  map[string]string
	OldFollowUps []FollowUp
	// Payload replaces the payload (required).
	Payload json.RawMessage
	// Metadata replaces the metadata when not nil.
	Metadata map[string]string
	// FollowUps replaces the follow-up templates when not nil.
	FollowUps []FollowUp
}

// Validate reports, wrapping ErrInvalidParams, a row no store can write.
func (p *CompletionResealParams) Validate() error {
	switch {
	case p.Batch == uuid.Nil:
		return fmt.Errorf("%w: reseal completion: batch ID is not set", ErrInvalidParams)
	case len(p.Payload) == 0 || len(p.OldPayload) == 0:
		return fmt.Errorf("%w: reseal completion of batch %s: payload not set", ErrInvalidParams, p.Batch)
	case len(p.Payload) > MaxPayloadSize:
		return fmt.Errorf("%w: reseal completion of batch %s: payload of %d bytes", ErrInvalidParams, p.Batch, len(p.Payload))
	}
	if err := CheckMetadata(p.Metadata); err != nil {
		return fmt.Errorf("%w: reseal completion of batch %s: %w", ErrInvalidParams, p.Batch, err)
	}
	for i, f := range p.FollowUps {
		if len(f.Job.Payload) > MaxPayloadSize {
			return fmt.Errorf("%w: reseal completion of batch %s: follow-up %d: payload of %d bytes", ErrInvalidParams, p.Batch, i, len(f.Job.Payload))
		}
		if err := CheckMetadata(f.Job.Metadata); err != nil {
			return fmt.Errorf("%w: reseal completion of batch %s: follow-up %d: %w", ErrInvalidParams, p.Batch, i, err)
		}
	}
	return nil
}

// Holds reports whether the template t still holds the values the row
// was read with: its payload byte for byte, its metadata, and as many
// follow-up templates, each with its payload byte for byte and its
// metadata. A store's ResealCompletions applies the row only then.
func (p *CompletionResealParams) Holds(t *InsertParams) bool {
	if !bytes.Equal(t.Payload, p.OldPayload) || !maps.Equal(t.Metadata, p.OldMetadata) || len(t.FollowUps) != len(p.OldFollowUps) {
		return false
	}
	for i, f := range t.FollowUps {
		old := p.OldFollowUps[i].Job
		if !bytes.Equal(f.Job.Payload, old.Payload) || !maps.Equal(f.Job.Metadata, old.Metadata) {
			return false
		}
	}
	return true
}

// Apply writes the row's values into the template t (which Holds them):
// its payload, and its metadata and follow-up templates when the row
// replaces them. The values are copied.
func (p *CompletionResealParams) Apply(t *InsertParams) {
	t.Payload = bytes.Clone(p.Payload)
	if p.Metadata != nil {
		t.Metadata = maps.Clone(p.Metadata)
	}
	if p.FollowUps != nil {
		fus := make([]FollowUp, len(p.FollowUps))
		for i, f := range p.FollowUps {
			f.On = slices.Clone(f.On)
			f.Job.Payload = bytes.Clone(f.Job.Payload)
			f.Job.Metadata = maps.Clone(f.Job.Metadata)
			fus[i] = f
		}
		t.FollowUps = fus
	}
}

// BatchResealer is implemented by stores that keep batches (BatchStore)
// and can rewrite the sealed values of the completion templates of the
// batches still running (memstore, pgstore, sqlitestore), for ax's
// Admin.Reencrypt, Admin.KeyUsage and Admin.CheckKeyRemoval: until its
// batch ends, a completion job is not in the jobs that Resealer and
// JobInspector reach.
type BatchResealer interface {
	// PendingCompletions returns the completion templates of the batches
	// that have not completed, by batch ID, after the cursor after (zero:
	// from the start), at most limit (1 to MaxListLimit).
	PendingCompletions(ctx context.Context, after uuid.UUID, limit int) ([]PendingCompletion, error)

	// ResealCompletions applies each row whose batch has not completed and
	// whose template still holds the row's old values
	// (CompletionResealParams.Holds), and reports, per row, whether it
	// applied (false: the batch completed, its template changed meanwhile,
	// or it is gone). Rows apply independently, in order.
	ResealCompletions(ctx context.Context, rows []CompletionResealParams) ([]bool, error)
}
