package ax

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Rotation of encryption keys (Config.Keys): a new current key seals the
// jobs scheduled from then on, and the older keys of the ring open the
// jobs they sealed. Admin.Reencrypt re-seals stored jobs with the current
// key, so that an old key can be retired (Admin.CheckKeyRemoval).

// ErrNoKeys is returned by the Admin calls that need a key ring
// (AdminConfig.Keys, or the Scheduler's Config.Keys) when there is none.
var ErrNoKeys = errors.New("ax: no encryption key ring (AdminConfig.Keys)")

// ErrKeyInUse is returned (as a *KeyInUseError) for a key that stored jobs
// still need.
var ErrKeyInUse = errors.New("ax: encryption key still seals stored jobs")

// KeyInUseError refuses to retire a key: Jobs stored jobs (and Schedules
// periodic schedule templates) still hold values it sealed.
type KeyInUseError struct {
	KeyID     string
	Jobs      int64
	Schedules int
}

// Error says how many jobs still need the key.
func (e *KeyInUseError) Error() string {
	return fmt.Sprintf("%v: key %q seals %d job(s) and %d schedule template(s); run Admin.Reencrypt (ax jobs reencrypt) first",
		ErrKeyInUse, e.KeyID, e.Jobs, e.Schedules)
}

// Unwrap returns ErrKeyInUse.
func (e *KeyInUseError) Unwrap() error { return ErrKeyInUse }

// DefaultReencryptBatch is ReencryptOptions.BatchSize's default.
const DefaultReencryptBatch = 100

// ReencryptOptions configures Admin.Reencrypt.
type ReencryptOptions struct {
	// BatchSize is how many jobs are read and re-sealed per store call, 1
	// to store.MaxListLimit. Defaults to DefaultReencryptBatch.
	BatchSize int
	// After resumes a pass: jobs are visited in ID order, those up to and
	// including After are skipped (a ReencryptProgress.Last). A pass
	// started over from the beginning is correct too, only slower: jobs
	// already sealed with the current key are left as they are.
	After uuid.UUID
	// Progress, when set, is called after each batch.
	Progress func(ReencryptProgress)
}

// ReencryptProgress counts what a pass of Admin.Reencrypt did so far.
type ReencryptProgress struct {
	// Scanned jobs, of which Resealed were written with the current key.
	Scanned, Resealed int64
	// Changed jobs changed while they were re-sealed (an attempt wrote
	// its result): left as they are; a later pass takes them.
	Changed int64
	// Unopenable jobs hold a value that none of the ring's keys opens
	// (ErrKeyMissing or ErrSealBroken): left as they are.
	Unopenable int64
	// Last is the last job visited: ReencryptOptions.After resumes after
	// it.
	Last uuid.UUID
}

// Reencrypt re-seals, with the ring's current key, every stored job that
// holds values sealed with an older key — payloads, results, secret
// metadata and follow-up templates, whatever the job's state — in
// batches of ReencryptOptions.BatchSize, while the cluster runs: a job is
// rewritten only if its payload and result did not change since it was
// read (store.Resealer). It returns what it did; on an error (ctx ended,
// the store failed) the progress made so far, whose Last resumes the
// pass. Periodic schedule templates are re-sealed by the hosts that
// declare them, at their Start.
//
// Errors: ErrNoKeys, ErrInvalidOption (BatchSize out of range),
// errors.ErrUnsupported (a store without store.JobInspector or
// store.Resealer), or the store's error, wrapped.
func (a *Admin) Reencrypt(ctx context.Context, opts ReencryptOptions) (ReencryptProgress, error) {
	prog := ReencryptProgress{Last: opts.After}
	if err := checkContext(ctx); err != nil {
		return prog, fmt.Errorf("reencrypt: %w", err)
	}
	keys := a.keyRing()
	if keys == nil {
		return prog, fmt.Errorf("reencrypt: %w", ErrNoKeys)
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return prog, unsupported("reencrypt", a.store, "store.JobInspector")
	}
	rs, ok := a.store.(store.Resealer)
	if !ok {
		return prog, unsupported("reencrypt", a.store, "store.Resealer")
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultReencryptBatch
	}
	if opts.BatchSize < 1 || opts.BatchSize > store.MaxListLimit {
		return prog, fmt.Errorf("reencrypt: %w: batch size %d not in [1, %d]", ErrInvalidOption, opts.BatchSize, store.MaxListLimit)
	}
	for {
		page, err := in.ListJobs(ctx, &store.ListJobsParams{Order: store.OldestFirst, After: prog.Last, Limit: opts.BatchSize})
		if err != nil {
			return prog, fmt.Errorf("reencrypt after %s: %w", prog.Last, err)
		}
		var rows []store.ResealParams
		for _, rec := range page.Jobs {
			row, stale, err := resealRow(keys, rec)
			switch {
			case err != nil:
				prog.Unopenable++
				a.log.Warn("reencrypt: job left as it is", zap.Stringer(fieldJobID, rec.ID), zap.Error(err))
			case stale:
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			applied, err := rs.Reseal(ctx, rows)
			if err != nil {
				return prog, fmt.Errorf("reencrypt after %s: %w", prog.Last, err)
			}
			for _, ok := range applied {
				if ok {
					prog.Resealed++
				} else {
					prog.Changed++
				}
			}
		}
		prog.Scanned += int64(len(page.Jobs))
		if len(page.Jobs) > 0 {
			prog.Last = page.Jobs[len(page.Jobs)-1].ID
		}
		if opts.Progress != nil {
			opts.Progress(prog)
		}
		if page.Next == uuid.Nil || len(page.Jobs) == 0 {
			a.audit("jobs re-encrypted", zap.String("key", keys.Current()), zap.Int64("scanned", prog.Scanned),
				zap.Int64("resealed", prog.Resealed), zap.Int64("changed", prog.Changed), zap.Int64("unopenable", prog.Unopenable))
			return prog, nil
		}
	}
}

// resealRow returns the row re-sealing rec's values with the current key,
// and whether any value needs it.
func resealRow(keys *KeyRing, rec *store.JobRecord) (store.ResealParams, bool, error) {
	refs := sealRefs{job: rec.ID, parent: rec.Parent}
	if sched, _ := parsePeriodicKey(rec.UniqueKey); sched != "" {
		refs.schedule = sched
	}
	row := store.ResealParams{ID: rec.ID, OldPayload: rec.Payload, Payload: rec.Payload, OldResult: rec.Result, Result: rec.Result}
	stale := false
	reseal := func(v []byte, part string, refs sealRefs) ([]byte, error) {
		if !IsSealed(v) || SealedKeyID(v) == keys.Current() {
			return v, nil
		}
		out, err := keys.reseal(v, part, refs)
		if err == nil {
			stale = true
		}
		return out, err
	}
	var err error
	if row.Payload, err = reseal(rec.Payload, partPayload, refs); err != nil {
		return row, false, err
	}
	if rec.Result != nil {
		if row.Result, err = reseal(rec.Result, partResult, refs); err != nil {
			return row, false, err
		}
	}
	md := maps.Clone(rec.Metadata)
	for k, v := range rec.Metadata {
		b, err := reseal([]byte(v), metadataPart(k), refs)
		if err != nil {
			return row, false, err
		}
		md[k] = string(b)
	}
	if !maps.Equal(md, rec.Metadata) {
		row.Metadata = md
	}
	fus := slices.Clone(rec.FollowUps)
	changed := false
	for i, f := range fus {
		frefs := sealRefs{parent: rec.ID}
		p, err := reseal(f.Job.Payload, partPayload, frefs)
		if err != nil {
			return row, false, fmt.Errorf("follow-up %d: %w", i, err)
		}
		fmd := maps.Clone(f.Job.Metadata)
		for k, v := range f.Job.Metadata {
			b, err := reseal([]byte(v), metadataPart(k), frefs)
			if err != nil {
				return row, false, fmt.Errorf("follow-up %d: %w", i, err)
			}
			fmd[k] = string(b)
		}
		if string(p) != string(f.Job.Payload) || !maps.Equal(fmd, f.Job.Metadata) {
			fus[i].Job.Payload, fus[i].Job.Metadata, changed = p, fmd, true
		}
	}
	if changed {
		row.FollowUps = fus
	}
	return row, stale, nil
}

// reseal opens sealed (part of the job refs names) and seals it again
// with the current key, bound as it was.
func (r *KeyRing) reseal(sealed []byte, part string, refs sealRefs) ([]byte, error) {
	plain, err := r.open(sealed, part, refs)
	if err != nil {
		return nil, err
	}
	env, _ := parseEnvelope(sealed) // open parsed it
	to := string(env.to)
	ref, _ := refs.ref(to)
	return r.seal(plain, part, to, ref)
}

// KeyUsage counts, per key ID, the stored jobs holding a value it sealed
// (a job sealed under two keys, mid-rotation, counts for both), and the
// periodic schedule templates. It reads every job, in pages of
// store.MaxListLimit. It needs no key ring. Errors: errors.ErrUnsupported
// (no store.JobInspector), or the store's error, wrapped.
func (a *Admin) KeyUsage(ctx context.Context) (jobs map[string]int64, schedules map[string]int, err error) {
	if err := checkContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("key usage: %w", err)
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return nil, nil, unsupported("key usage", a.store, "store.JobInspector")
	}
	jobs, schedules = map[string]int64{}, map[string]int{}
	after := uuid.Nil
	for {
		page, err := in.ListJobs(ctx, &store.ListJobsParams{Order: store.OldestFirst, After: after, Limit: store.MaxListLimit})
		if err != nil {
			return nil, nil, fmt.Errorf("key usage: %w", err)
		}
		for _, rec := range page.Jobs {
			for id := range recordKeys(rec) {
				jobs[id]++
			}
		}
		if page.Next == uuid.Nil || len(page.Jobs) == 0 {
			break
		}
		after = page.Jobs[len(page.Jobs)-1].ID
	}
	if pc, ok := a.store.(store.PeriodicController); ok {
		states, err := pc.ListPeriodic(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("key usage: schedules: %w", err)
		}
		for _, st := range states {
			if st.Job == nil {
				continue
			}
			for id := range insertKeys(st.Job) {
				schedules[id]++
			}
		}
	}
	return jobs, schedules, nil
}

// CheckKeyRemoval returns nil when no stored job or schedule template
// holds a value sealed with key id, so that it can leave the key rings,
// and a *KeyInUseError (ErrKeyInUse) with the counts otherwise. Errors as
// for KeyUsage besides.
func (a *Admin) CheckKeyRemoval(ctx context.Context, id string) error {
	jobs, schedules, err := a.KeyUsage(ctx)
	if err != nil {
		return fmt.Errorf("remove key %q: %w", id, err)
	}
	if jobs[id] > 0 || schedules[id] > 0 {
		return fmt.Errorf("remove key %q: %w", id, &KeyInUseError{KeyID: id, Jobs: jobs[id], Schedules: schedules[id]})
	}
	return nil
}

// recordKeys returns the keys that sealed values of rec.
func recordKeys(rec *store.JobRecord) map[string]bool {
	ids := map[string]bool{}
	add := func(v []byte) {
		if id := SealedKeyID(v); id != "" {
			ids[id] = true
		}
	}
	add(rec.Payload)
	add(rec.Result)
	for _, v := range rec.Metadata {
		add([]byte(v))
	}
	for i := range rec.FollowUps {
		maps.Copy(ids, insertKeys(&rec.FollowUps[i].Job))
	}
	return ids
}

// insertKeys returns the keys that sealed values of a job template.
func insertKeys(p *store.InsertParams) map[string]bool {
	ids := map[string]bool{}
	if id := SealedKeyID(p.Payload); id != "" {
		ids[id] = true
	}
	for _, v := range p.Metadata {
		if id := SealedKeyID(v); id != "" {
			ids[id] = true
		}
	}
	return ids
}

// keyRing returns the Admin's key ring, or nil.
func (a *Admin) keyRing() *KeyRing {
	if a.sched != nil {
		return a.sched.cfg.Keys
	}
	return a.keys
}

// openRecords opens, in place, the sealed values of recs that the ring
// opens: payloads, results and metadata. Values it cannot open stay
// sealed (tools show them as encrypted), as does everything without a
// ring.
func openRecords(keys *KeyRing, recs ...*store.JobRecord) {
	if keys == nil {
		return
	}
	for _, rec := range recs {
		if rec == nil {
			continue
		}
		refs := sealRefs{job: rec.ID, parent: rec.Parent}
		if sched, _ := parsePeriodicKey(rec.UniqueKey); sched != "" {
			refs.schedule = sched
		}
		if IsSealed(rec.Payload) {
			if plain, err := keys.open(rec.Payload, partPayload, refs); err == nil {
				rec.Payload = plain
			}
		}
		if IsSealed(rec.Result) {
			if plain, err := keys.open(rec.Result, partResult, refs); err == nil {
				rec.Result = plain
			}
		}
		for k, v := range rec.Metadata {
			if sealedString(v) {
				if plain, err := keys.open([]byte(v), metadataPart(k), refs); err == nil {
					rec.Metadata[k] = string(plain)
				}
			}
		}
	}
}
