package ax

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// Where the Scheduler seals and opens (see Config.Keys; the envelope is in
// sealing.go): insertParams and insertParam seal every job they build
// (Schedule, ScheduleMany, ScheduleTx, batches, Then, periodic ticks), a
// handler's result is sealed as it is recorded, and a claimed job is
// opened on the worker goroutine just before its handler runs.

// secretMarker prefixes a metadata value given with SecretMetadata until
// the job is sealed. Metadata values never hold NUL bytes
// (store.CheckMetadata), so no plain value starts with it.
const secretMarker = "\x00ax-secret\x00"

// SecretMetadata attaches metadata whose values are sealed like the
// payload (Config.Keys must be set: otherwise Schedule returns an error
// wrapping ErrInvalidOption). The handler sees the plain values in
// Job.Metadata; the store, its backups, Observers' events, logs and tools
// without the key ring see sealed ones, so a
// secret value cannot be used to filter listings (JobFilter.Metadata) or
// to partition (PartitionByMetadata). Keys are plain. Same rules as
// Metadata otherwise; a key given to both keeps the later option's value.
func SecretMetadata(md map[string]string) JobOption { return secretMetadataOption(maps.Clone(md)) }

type secretMetadataOption map[string]string

func (o secretMetadataOption) marked() (metadataOption, error) {
	if err := store.CheckMetadata(o); err != nil {
		return nil, fmt.Errorf("%w: SecretMetadata: %w", ErrInvalidOption, err)
	}
	m := make(metadataOption, len(o))
	for k, v := range o {
		m[k] = secretMarker + v
	}
	return m, nil
}

func (o secretMetadataOption) applySchedule(s *scheduleSettings) error {
	m, err := o.marked()
	if err != nil {
		return err
	}
	if s.metadata == nil {
		s.metadata = make(map[string]string, len(m))
	}
	maps.Copy(s.metadata, m)
	return nil
}

func (o secretMetadataOption) applyPeriodic(s *periodicSettings) error {
	if _, err := o.marked(); err != nil {
		return err
	}
	if err := checkTickMetadata(o); err != nil {
		return fmt.Errorf("%w: SecretMetadata: %w", ErrInvalidOption, err)
	}
	s.jobOpts = append(s.jobOpts, o)
	return nil
}

// sealInsert seals a job about to be inserted, and its FollowUp jobs
// (bound to it, their parent: the store names them when it ends). Without
// a key ring it only refuses SecretMetadata.
func (s *Scheduler) sealInsert(p *store.InsertParams) error {
	keys := s.cfg.Keys
	if err := sealJob(keys, p, bindJob, string(p.ID[:])); err != nil {
		return err
	}
	if len(p.FollowUps) == 0 {
		return nil
	}
	fus := make([]store.FollowUp, len(p.FollowUps))
	for i, f := range p.FollowUps {
		f.Job.Metadata = maps.Clone(f.Job.Metadata)
		if err := sealJob(keys, &f.Job, bindParent, string(p.ID[:])); err != nil {
			return fmt.Errorf("follow-up %q: %w", f.Job.Kind, err)
		}
		fus[i] = f
	}
	p.FollowUps = fus
	return nil
}

// sealJob seals p's payload and its metadata values marked secret, bound
// to ref (to says what ref is).
func sealJob(keys *KeyRing, p *store.InsertParams, to, ref string) error {
	secrets := false
	for k, v := range p.Metadata {
		plain, secret := strings.CutPrefix(v, secretMarker)
		if !secret {
			continue
		}
		if keys == nil {
			return fmt.Errorf("%w: SecretMetadata needs Config.Keys", ErrInvalidOption)
		}
		sealed, err := keys.seal([]byte(plain), metadataPart(k), to, ref)
		if err != nil {
			return err
		}
		p.Metadata[k], secrets = string(sealed), true
	}
	if secrets {
		if err := store.CheckMetadata(p.Metadata); err != nil {
			return fmt.Errorf("%w: sealed metadata: %w", ErrInvalidOption, err)
		}
	}
	if keys == nil {
		return nil
	}
	sealed, err := keys.seal(p.Payload, partPayload, to, ref)
	if err != nil {
		return err
	}
	if len(sealed) > store.MaxPayloadSize {
		return fmt.Errorf("%w: %d bytes sealed, more than the %d allowed", ErrInvalidPayload, len(sealed), store.MaxPayloadSize)
	}
	p.Payload = sealed
	return nil
}

// sealedTemplate returns the job template of periodic schedule name: tmpl
// (sealed for its own ID by insertParam) sealed again for the schedule,
// since Admin.TriggerSchedule inserts it under a new ID.
func (s *Scheduler) sealedTemplate(tmpl store.InsertParams, name string) (store.InsertParams, error) {
	keys := s.cfg.Keys
	if keys == nil {
		return tmpl, nil
	}
	refs := sealRefs{job: tmpl.ID}
	plain, err := keys.open(tmpl.Payload, partPayload, refs)
	if err != nil {
		return tmpl, err
	}
	if tmpl.Payload, err = keys.seal(plain, partPayload, bindSchedule, name); err != nil {
		return tmpl, err
	}
	md := maps.Clone(tmpl.Metadata)
	for k, v := range md {
		if !sealedString(v) {
			continue
		}
		plain, err := keys.open([]byte(v), metadataPart(k), refs)
		if err != nil {
			return tmpl, err
		}
		sealed, err := keys.seal(plain, metadataPart(k), bindSchedule, name)
		if err != nil {
			return tmpl, err
		}
		md[k] = string(sealed)
	}
	tmpl.Metadata = md
	return tmpl, nil
}

// sealResult seals a result recorded by the handler of job id.
func (s *Scheduler) sealResult(id uuid.UUID, b json.RawMessage) (json.RawMessage, error) {
	keys := s.cfg.Keys
	if keys == nil {
		return b, nil
	}
	sealed, err := keys.seal(b, partResult, bindJob, string(id[:]))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidResult, err)
	}
	if len(sealed) > store.MaxResultSize {
		return nil, fmt.Errorf("%w: %d bytes sealed, more than %d", ErrInvalidResult, len(sealed), store.MaxResultSize)
	}
	return sealed, nil
}

// refsOf returns the names the sealed values of job may be bound to.
func refsOf(job *Job) sealRefs {
	return sealRefs{job: job.ID, parent: job.Parent, schedule: job.Schedule}
}

// openJob opens job's sealed payload and metadata in place, with keys
// (nil: no key ring, and any sealed value fails). Plain values are left
// as they are, so jobs stored before encryption was turned on still run.
func openJob(keys *KeyRing, job *Job) error {
	refs := refsOf(job)
	if mightBeSealed(job.Payload) {
		plain, err := keys.open(job.Payload, partPayload, refs)
		if err != nil {
			return err
		}
		job.Payload = plain
	}
	var md map[string]string
	for k, v := range job.Metadata {
		if !sealedString(v) {
			continue
		}
		plain, err := keys.open([]byte(v), metadataPart(k), refs)
		if err != nil {
			return err
		}
		if md == nil {
			md = maps.Clone(job.Metadata) // the record's map is shared with events
		}
		md[k] = string(plain)
	}
	if md != nil {
		job.Metadata = md
	}
	return nil
}

// callOpened opens the attempt's job and calls its handler. A job whose
// values do not authenticate fails permanently, naming the key, without
// calling it: no host can open a tampered value. A job this host cannot
// open but another may (a key not in this host's ring, an envelope of a
// newer release: a rolling deploy of a key or of ax) is left for such a
// host: snoozed for wait, the attempt not counted (keyWaitError).
// Only this attempt is concerned: the host and its other jobs carry on.
// The handler gets an opened copy of the job: the attempt's own stays as
// the store holds it, for the other goroutines that read it (events of
// the attempt's end, lease loss and hand-back), so Observers never see
// secret metadata plain, only the handler does.
func callOpened(ctx context.Context, a *attempt, keys *KeyRing, wait time.Duration) error {
	if !hasSealed(a.job) {
		return callHandler(ctx, a)
	}
	opened := *a.job
	if err := openJob(keys, &opened); err != nil {
		err = fmt.Errorf("job %s: %w", a.job.ID, err)
		if errors.Is(err, ErrKeyMissing) || errors.Is(err, ErrSealFormat) {
			return &keyWaitError{err: err, snooze: SnoozeError{Delay: wait}}
		}
		return Permanent(err)
	}
	opened.sealed = mightBeSealed(a.job.Payload) // decode errors withhold its values (decode.go)
	return callHandler(ctx, &attempt{job: &opened, kind: a.kind})
}

// keyWaitError is the outcome of an attempt whose job this host cannot
// open but a host with the right key ring or release can: a snooze (the
// attempt is not counted), logged at warn and sent as EventKeyMissing.
type keyWaitError struct {
	err    error // wraps the *SealError
	snooze SnoozeError
}

func (e *keyWaitError) Error() string {
	return "left for a host that can open it: " + e.err.Error()
}

func (e *keyWaitError) Unwrap() []error { return []error{e.err, &e.snooze} }

// keyWait reports whether err is a keyWaitError.
func keyWait(err error) bool {
	var kw *keyWaitError
	return errors.As(err, &kw)
}

// hasSealed reports, cheaply, whether job holds a sealed value.
func hasSealed(job *Job) bool {
	if mightBeSealed(job.Payload) {
		return true
	}
	for _, v := range job.Metadata {
		if sealedString(v) {
			return true
		}
	}
	return false
}

// checkEncryptedKind refuses, at Handle, what cannot work on sealed
// payloads.
func (s *Scheduler) checkEncryptedKind(h *handlerSettings) error {
	if s.cfg.Keys != nil && h.flow.Partition.PayloadField != "" {
		return fmt.Errorf("%w: PartitionByPayloadField(%q): payloads are encrypted (Config.Keys) and the store cannot read the field; use PartitionByMetadata",
			ErrInvalidOption, h.flow.Partition.PayloadField)
	}
	return nil
}
