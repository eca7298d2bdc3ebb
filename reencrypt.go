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
// key, so that an old key can be retired (Admin.CheckKeyRemoval). A
// batch's completion job is held by the store as a template until the
// batch's last child ends (store.BatchResealer): Reencrypt, KeyUsage and
// CheckKeyRemoval reach it there, before the jobs, so that one inserted
// meanwhile is met among the jobs.

// ErrNoKeys is returned by the Admin calls that need a key ring
// (AdminConfig.Keys, or the Scheduler's Config.Keys) when there is none.
var ErrNoKeys = errors.New("ax: no encryption key ring (AdminConfig.Keys)")

// ErrKeyInUse is returned (as a *KeyInUseError) for a key that stored jobs
// still need.
var ErrKeyInUse = errors.New("ax: encryption key still seals stored jobs")

// KeyInUseError refuses to retire a key: Jobs stored jobs (Schedules
// periodic schedule templates, and Batches completion jobs of batches
// still running) still hold values it sealed.
type KeyInUseError struct {
	KeyID     string
	Jobs      int64
	Schedules int
	// Batches counts the completion jobs of running batches, which the
	// store holds as templates until their last child ends (not in Jobs).
	Batches int64
}

// Error says how many jobs still need the key.
func (e *KeyInUseError) Error() string {
	if e.Batches > 0 {
		return fmt.Sprintf("%v: key %q seals %d job(s), %d schedule template(s) and %d completion job(s) of running batches; run Admin.Reencrypt (ax jobs reencrypt) first",
			ErrKeyInUse, e.KeyID, e.Jobs, e.Schedules, e.Batches)
	}
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
	// Progress, when set, is called after each batch of jobs.
	Progress func(ReencryptProgress)
	// SealPlain also seals, with the current key, the values stored plain:
	// those of jobs scheduled before Config.Keys was set, or by a host
	// without it. Payloads, results and follow-up templates' payloads (and
	// the metadata values SecretMetadata names) are sealed bound to their
	// job, as Schedule would have sealed them (a template to its parent),
	// whatever the job's state, under the same fence as re-sealing; so are
	// those of running batches' completion jobs. Turn it on only once
	// every host has the ring: a host without it fails the jobs it can no
	// longer read (ErrKeyMissing). What cannot be sealed is left plain and
	// counted in ReencryptProgress.LeftPlain.
	SealPlain bool
	// SecretMetadata names the metadata keys whose plain values SealPlain
	// seals, in jobs and follow-up templates, as if they had been given to
	// Schedule with the SecretMetadata option: from then on they cannot be
	// filtered on. The
	// Admin cannot tell them itself: a job scheduled without the ring
	// could not use SecretMetadata, so its metadata is all plain alike. A
	// key that a stored kind partitions by (PartitionByMetadata) is
	// refused. Needs SealPlain.
	SecretMetadata []string
}

// ReencryptProgress counts what a pass of Admin.Reencrypt did so far. The
// completion jobs of running batches, held by the store as templates
// (store.BatchResealer), count as jobs: they are visited first, in every
// pass (a resumed one too), and their counts are in the first Progress
// call.
type ReencryptProgress struct {
	// Scanned jobs, of which Resealed were written with the current key.
	Scanned, Resealed int64
	// Sealed jobs, of the Resealed, held values stored plain that were
	// sealed (ReencryptOptions.SealPlain).
	Sealed int64
	// LeftPlain jobs hold plain values SealPlain could not seal, left as
	// they are (the job's values that can be sealed are): a value that, sealed,
	// would be over the store's limits (store.MaxPayloadSize,
	// store.MaxResultSize, store.MaxMetadataSize), and the values of jobs
	// and follow-up templates of a kind the store holds as partitioned by
	// a payload field (PartitionByPayloadField, which a host with
	// Config.Keys refuses: a host without the ring declared it, and the
	// store reads those partition keys from plain payloads).
	LeftPlain int64
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

// count adds a store's answer for rows written by a pass: applied per
// row, and sealed per row (it sealed plain values).
func (p *ReencryptProgress) count(applied, sealed []bool) {
	for i, ok := range applied {
		switch {
		case !ok:
			p.Changed++
		case sealed[i]:
			p.Resealed++
			p.Sealed++
		default:
			p.Resealed++
		}
	}
}

// Reencrypt re-seals, with the ring's current key, every stored job that
// holds values sealed with an older key — payloads, results, secret
// metadata and follow-up templates, whatever the job's state — in
// batches of ReencryptOptions.BatchSize, while the cluster runs: a job is
// rewritten only if its payload and result did not change since it was
// read (store.Resealer). The completion jobs of batches still running,
// which the store holds as templates until the last child ends, are
// re-sealed first, each only while its batch has not completed and its
// template is as read (store.BatchResealer); one whose batch completes
// meanwhile counts as Changed, and its job is re-sealed among the jobs
// (by a later pass if this one resumed, After, past its ID). With
// ReencryptOptions.SealPlain it also seals the values stored plain, so
// that a deployment that turned encryption on keeps no plain job behind. It returns what it did; on an error (ctx
// ended, the store failed) the progress made so far, whose Last resumes
// the pass. Periodic schedule templates are re-sealed by the hosts that
// declare them, at their Start.
//
// Errors: ErrNoKeys, ErrInvalidOption (BatchSize out of range,
// SecretMetadata without SealPlain or naming a partition key),
// errors.ErrUnsupported (a store without store.JobInspector or
// store.Resealer, or one that keeps batches, store.BatchStore, without
// store.BatchResealer: its batches' completion jobs would keep the old
// key, so nothing is re-sealed), or the store's error, wrapped.
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
	brs, err := a.batchResealer("reencrypt")
	if err != nil {
		return prog, err
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultReencryptBatch
	}
	if opts.BatchSize < 1 || opts.BatchSize > store.MaxListLimit {
		return prog, fmt.Errorf("reencrypt: %w: batch size %d not in [1, %d]", ErrInvalidOption, opts.BatchSize, store.MaxListLimit)
	}
	rr := resealer{keys: keys}
	if opts.SealPlain {
		var err error
		if rr.plain, err = a.readPlainSealing(ctx, opts.SecretMetadata); err != nil {
			return prog, fmt.Errorf("reencrypt: %w", err)
		}
	} else if len(opts.SecretMetadata) > 0 {
		return prog, fmt.Errorf("reencrypt: %w: SecretMetadata needs SealPlain", ErrInvalidOption)
	}
	if brs != nil {
		if err := a.reencryptCompletions(ctx, brs, &rr, opts.BatchSize, &prog); err != nil {
			return prog, fmt.Errorf("reencrypt: %w", err)
		}
	}
	for {
		page, err := in.ListJobs(ctx, &store.ListJobsParams{Order: store.OldestFirst, After: prog.Last, Limit: opts.BatchSize})
		if err != nil {
			return prog, fmt.Errorf("reencrypt after %s: %w", prog.Last, err)
		}
		var rows []store.ResealParams
		var sealed []bool // per row: it seals plain values
		for _, rec := range page.Jobs {
			if row, write := a.resealRow(&rr, rec, &prog); write {
				rows = append(rows, row.ResealParams)
				sealed = append(sealed, row.sealed)
			}
		}
		if len(rows) > 0 {
			applied, err := rs.Reseal(ctx, rows)
			if err != nil {
				return prog, fmt.Errorf("reencrypt after %s: %w", prog.Last, err)
			}
			prog.count(applied, sealed)
		}
		prog.Scanned += int64(len(page.Jobs))
		if len(page.Jobs) > 0 {
			prog.Last = page.Jobs[len(page.Jobs)-1].ID
		}
		if opts.Progress != nil {
			opts.Progress(prog)
		}
		if page.Next == uuid.Nil || len(page.Jobs) == 0 {
			a.audit("jobs re-encrypted", zap.String("key", keys.Current()), zap.Bool("seal_plain", opts.SealPlain),
				zap.Int64("scanned", prog.Scanned), zap.Int64("resealed", prog.Resealed), zap.Int64("sealed", prog.Sealed),
				zap.Int64("changed", prog.Changed), zap.Int64("unopenable", prog.Unopenable), zap.Int64("left_plain", prog.LeftPlain))
			return prog, nil
		}
	}
}

// batchResealer returns the store's BatchResealer; nil for a store that
// keeps no batches; an error wrapping errors.ErrUnsupported for one that
// keeps batches without it, whose running batches' completion jobs the
// Admin can neither count nor re-seal.
func (a *Admin) batchResealer(what string) (store.BatchResealer, error) {
	if brs, ok := a.store.(store.BatchResealer); ok {
		return brs, nil
	}
	if _, ok := a.store.(store.BatchStore); !ok {
		return nil, nil
	}
	return nil, fmt.Errorf("%s: store %T keeps batches (store.BatchStore) but does not implement store.BatchResealer: "+
		"the completion jobs of running batches, which it holds apart, cannot be counted or re-sealed: %w", what, a.store, errors.ErrUnsupported)
}

// reencryptCompletions re-seals, as Reencrypt does a job's values, the
// completion templates of the batches still running, in pages of size,
// counting them in prog as jobs.
func (a *Admin) reencryptCompletions(ctx context.Context, brs store.BatchResealer, rr *resealer, size int, prog *ReencryptProgress) error {
	after := uuid.Nil
	for {
		page, err := brs.PendingCompletions(ctx, after, size)
		if err != nil {
			return fmt.Errorf("batch completions after %s: %w", after, err)
		}
		var rows []store.CompletionResealParams
		var sealed []bool // per row: it seals plain values
		for _, pc := range page {
			if row, write := a.resealRow(rr, completionRecord(&pc.Job), prog, zap.Stringer("batch_id", pc.Batch)); write {
				rows = append(rows, store.CompletionResealParams{Batch: pc.Batch,
					OldPayload: pc.Job.Payload, OldMetadata: pc.Job.Metadata, OldFollowUps: pc.Job.FollowUps,
					Payload: row.Payload, Metadata: row.Metadata, FollowUps: row.FollowUps})
				sealed = append(sealed, row.sealed)
			}
		}
		if len(rows) > 0 {
			applied, err := brs.ResealCompletions(ctx, rows)
			if err != nil {
				return fmt.Errorf("batch completions after %s: %w", after, err)
			}
			prog.count(applied, sealed)
		}
		prog.Scanned += int64(len(page))
		if len(page) < size {
			return nil
		}
		after = page[len(page)-1].Batch
	}
}

// resealRow returns rec's row for a pass, and whether it is to be
// written (a value is re-sealed or sealed); a job the ring cannot open
// and plain values left plain are counted in prog and logged with fields.
func (a *Admin) resealRow(rr *resealer, rec *store.JobRecord, prog *ReencryptProgress, fields ...zap.Field) (resealRow, bool) {
	fields = append(fields, zap.Stringer(fieldJobID, rec.ID), zap.String(fieldKind, rec.Kind))
	row, err := rr.row(rec)
	if err != nil {
		prog.Unopenable++
		a.log.Warn("reencrypt: job left as it is", append(fields, zap.Error(err))...)
		return row, false
	}
	if row.leftPlain != "" {
		prog.LeftPlain++
		a.log.Warn("reencrypt: plain values left plain", append(fields, zap.String("reason", row.leftPlain))...)
	}
	return row, row.stale || row.sealed
}

// completionRecord returns a batch's completion template as the job it
// will be, for resealer.row and recordKeys.
func completionRecord(p *store.InsertParams) *store.JobRecord {
	return &store.JobRecord{ID: p.ID, Kind: p.Kind, Payload: p.Payload, Metadata: p.Metadata, FollowUps: p.FollowUps}
}

// readPlainSealing returns what SealPlain seals: the metadata keys named,
// checked, and the kinds whose values stay plain, from the flows the store
// holds when the pass starts.
func (a *Admin) readPlainSealing(ctx context.Context, secret []string) (*plainSealing, error) {
	p := &plainSealing{secret: map[string]bool{}, payloadPartitioned: map[string]bool{}}
	for _, k := range secret {
		if k == "" {
			return nil, fmt.Errorf("%w: SecretMetadata: empty metadata key", ErrInvalidOption)
		}
		if err := store.CheckText(k, 0); err != nil {
			return nil, fmt.Errorf("%w: SecretMetadata key %q: %w", ErrInvalidOption, k, err)
		}
		p.secret[k] = true
	}
	fs, ok := a.store.(store.FlowStore)
	if !ok {
		return p, nil
	}
	flows, err := fs.Flows(ctx)
	if err != nil {
		return nil, fmt.Errorf("read kinds' partitions: %w", err)
	}
	for _, f := range flows {
		src := f.Config.Partition
		if src.PayloadField != "" {
			p.payloadPartitioned[f.Config.Kind] = true
		}
		if p.secret[src.Metadata] {
			return nil, fmt.Errorf("%w: SecretMetadata %q: kind %q partitions by it, and a sealed value cannot be partitioned on",
				ErrInvalidOption, src.Metadata, f.Config.Kind)
		}
	}
	return p, nil
}

// plainSealing configures the sealing of plain values (SealPlain).
type plainSealing struct {
	secret             map[string]bool // metadata keys to seal
	payloadPartitioned map[string]bool // kinds whose values stay plain
}

// plainPolicy says whether a plain value is sealed (SealPlain), and why
// not when it is asked for but cannot be.
type plainPolicy struct {
	seal bool
	why  string
}

// resealer builds the rows of a pass.
type resealer struct {
	keys  *KeyRing
	plain *plainSealing // nil: plain values stay plain
}

// resealRow is one job's row, and what it does.
type resealRow struct {
	store.ResealParams
	// stale: a value sealed with an older key is re-sealed; sealed: a
	// plain value is sealed.
	stale, sealed bool
	// leftPlain says why plain values that SealPlain would seal stay
	// plain ("" for none).
	leftPlain string
}

// row returns the row re-sealing rec's values with the current key and,
// with r.plain, sealing its plain ones. An error is a value the ring does
// not open.
func (r *resealer) row(rec *store.JobRecord) (resealRow, error) {
	refs := sealRefs{job: rec.ID, parent: rec.Parent}
	if sched, _ := parsePeriodicKey(rec.UniqueKey); sched != "" {
		refs.schedule = sched
	}
	row := resealRow{ResealParams: store.ResealParams{ID: rec.ID, OldPayload: rec.Payload, Payload: rec.Payload,
		OldResult: rec.Result, Result: rec.Result}}
	// policy says whether the plain values of a job (or template) of kind
	// are sealed, and why not when SealPlain asks for it.
	policy := func(kind string) plainPolicy {
		switch {
		case r.plain == nil:
			return plainPolicy{}
		case r.plain.payloadPartitioned[kind]:
			return plainPolicy{why: fmt.Sprintf("kind %q is partitioned by a payload field", kind)}
		}
		return plainPolicy{seal: true}
	}
	// value returns v (part of the job refs names) with the current key:
	// re-sealed if sealed with another, sealed (bound to the name to) if
	// plain and pol says so, as it is otherwise.
	value := func(v []byte, part string, refs sealRefs, pol plainPolicy, to string, max int) ([]byte, error) {
		if !IsSealed(v) {
			if pol.why != "" {
				row.leftPlain = pol.why
			}
			if !pol.seal {
				return v, nil
			}
			ref, _ := refs.ref(to)
			out, err := r.keys.seal(v, part, to, ref)
			if err != nil {
				return nil, err
			}
			if max > 0 && len(out) > max {
				row.leftPlain = fmt.Sprintf("%s of %d bytes sealed, more than the %d allowed", part, len(out), max)
				return v, nil
			}
			row.sealed = true
			return out, nil
		}
		if SealedKeyID(v) == r.keys.Current() {
			return v, nil
		}
		out, err := r.keys.reseal(v, part, refs)
		if err == nil {
			row.stale = true
		}
		return out, err
	}
	// metadata returns md with its values re-sealed, and the plain values
	// of the secret keys sealed as pol says, or nil when none changes.
	metadata := func(md map[string]string, refs sealRefs, pol plainPolicy, to string) (map[string]string, error) {
		out := maps.Clone(md)
		sealedBefore := row.sealed
		for k, v := range md {
			kpol := pol
			if r.plain == nil || !r.plain.secret[k] {
				kpol = plainPolicy{}
			}
			b, err := value([]byte(v), metadataPart(k), refs, kpol, to, 0)
			if err != nil {
				return nil, err
			}
			out[k] = string(b)
		}
		if row.sealed != sealedBefore && store.CheckMetadata(out) != nil {
			// Sealed, the values are over the limits: those stay plain.
			for k, v := range md {
				if !IsSealed(v) {
					out[k] = v
				}
			}
			row.sealed = sealedBefore
			row.leftPlain = fmt.Sprintf("metadata sealed over the %d bytes allowed", store.MaxMetadataSize)
		}
		if maps.Equal(out, md) {
			return nil, nil
		}
		return out, nil
	}
	own := policy(rec.Kind)
	var err error
	if row.Payload, err = value(rec.Payload, partPayload, refs, own, bindJob, store.MaxPayloadSize); err != nil {
		return row, err
	}
	if rec.Result != nil {
		if row.Result, err = value(rec.Result, partResult, refs, own, bindJob, store.MaxResultSize); err != nil {
			return row, err
		}
	}
	if row.Metadata, err = metadata(rec.Metadata, refs, own, bindJob); err != nil {
		return row, err
	}
	fus := slices.Clone(rec.FollowUps)
	changed := false
	for i, f := range fus {
		frefs := sealRefs{parent: rec.ID}
		fpol := policy(f.Job.Kind)
		p, err := value(f.Job.Payload, partPayload, frefs, fpol, bindParent, store.MaxPayloadSize)
		if err != nil {
			return row, fmt.Errorf("follow-up %d: %w", i, err)
		}
		fmd, err := metadata(f.Job.Metadata, frefs, fpol, bindParent)
		if err != nil {
			return row, fmt.Errorf("follow-up %d: %w", i, err)
		}
		if string(p) != string(f.Job.Payload) || fmd != nil {
			fus[i].Job.Payload, changed = p, true
			if fmd != nil {
				fus[i].Job.Metadata = fmd
			}
		}
	}
	if changed {
		row.FollowUps = fus
	}
	return row, nil
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

// KeyUses counts what holds values sealed with one key (Admin.KeyUses).
type KeyUses struct {
	// Jobs are stored jobs.
	Jobs int64 `json:"jobs"`
	// Schedules are periodic schedule templates.
	Schedules int `json:"schedules"`
	// Batches are the completion jobs of batches still running, which the
	// store holds as templates until their last child ends.
	Batches int64 `json:"batches"`
}

// KeyUses counts, per key ID, the stored jobs holding a value it sealed
// (a job sealed under two keys, mid-rotation, counts for both), the
// periodic schedule templates, and the completion jobs of batches still
// running (read first: one whose batch completes meanwhile counts among
// the jobs too, never in neither). It reads every job, in pages of
// store.MaxListLimit. It needs no key ring. Errors: errors.ErrUnsupported
// (no store.JobInspector, or a store.BatchStore without
// store.BatchResealer, whose batches' completion jobs cannot be counted),
// or the store's error, wrapped.
func (a *Admin) KeyUses(ctx context.Context) (map[string]KeyUses, error) {
	uses, err := a.keyUses(ctx)
	if err != nil {
		return nil, fmt.Errorf("key usage: %w", err)
	}
	return uses, nil
}

// KeyUsage counts, per key ID, the stored jobs holding a value it sealed
// (a job sealed under two keys, mid-rotation, counts for both), counting
// as jobs the completion jobs of batches still running, and the
// periodic schedule templates. KeyUses tells the completion jobs apart;
// errors are its own.
func (a *Admin) KeyUsage(ctx context.Context) (jobs map[string]int64, schedules map[string]int, err error) {
	uses, err := a.keyUses(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("key usage: %w", err)
	}
	jobs, schedules = map[string]int64{}, map[string]int{}
	for id, u := range uses {
		if n := u.Jobs + u.Batches; n > 0 {
			jobs[id] = n
		}
		if u.Schedules > 0 {
			schedules[id] = u.Schedules
		}
	}
	return jobs, schedules, nil
}

// keyUses is KeyUses, its errors not wrapped.
func (a *Admin) keyUses(ctx context.Context) (map[string]KeyUses, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	in, ok := a.store.(store.JobInspector)
	if !ok {
		return nil, fmt.Errorf("store %T does not implement store.JobInspector: %w", a.store, errors.ErrUnsupported)
	}
	brs, err := a.batchResealer("batch completions")
	if err != nil {
		return nil, err
	}
	uses := map[string]KeyUses{}
	add := func(ids map[string]bool, f func(*KeyUses)) {
		for id := range ids {
			u := uses[id]
			f(&u)
			uses[id] = u
		}
	}
	// Completion templates first: one that becomes a job meanwhile is
	// then among the jobs read after.
	if brs != nil {
		after := uuid.Nil
		for {
			page, err := brs.PendingCompletions(ctx, after, store.MaxListLimit)
			if err != nil {
				return nil, fmt.Errorf("batch completions: %w", err)
			}
			for i := range page {
				add(recordKeys(completionRecord(&page[i].Job)), func(u *KeyUses) { u.Batches++ })
			}
			if len(page) < store.MaxListLimit {
				break
			}
			after = page[len(page)-1].Batch
		}
	}
	after := uuid.Nil
	for {
		page, err := in.ListJobs(ctx, &store.ListJobsParams{Order: store.OldestFirst, After: after, Limit: store.MaxListLimit})
		if err != nil {
			return nil, err
		}
		for _, rec := range page.Jobs {
			add(recordKeys(rec), func(u *KeyUses) { u.Jobs++ })
		}
		if page.Next == uuid.Nil || len(page.Jobs) == 0 {
			break
		}
		after = page.Jobs[len(page.Jobs)-1].ID
	}
	if pc, ok := a.store.(store.PeriodicController); ok {
		states, err := pc.ListPeriodic(ctx)
		if err != nil {
			return nil, fmt.Errorf("schedules: %w", err)
		}
		for _, st := range states {
			if st.Job == nil {
				continue
			}
			add(insertKeys(st.Job), func(u *KeyUses) { u.Schedules++ })
		}
	}
	return uses, nil
}

// CheckKeyRemoval returns nil when no stored job, schedule template or
// completion job of a running batch holds a value sealed with key id, so
// that it can leave the key rings, and a *KeyInUseError (ErrKeyInUse)
// with the counts otherwise. Errors as for KeyUses besides: a store that
// keeps batches without store.BatchResealer is refused
// (errors.ErrUnsupported), as it cannot tell.
func (a *Admin) CheckKeyRemoval(ctx context.Context, id string) error {
	uses, err := a.keyUses(ctx)
	if err != nil {
		return fmt.Errorf("remove key %q: %w", id, err)
	}
	if u := uses[id]; u.Jobs > 0 || u.Schedules > 0 || u.Batches > 0 {
		return fmt.Errorf("remove key %q: %w", id, &KeyInUseError{KeyID: id, Jobs: u.Jobs, Schedules: u.Schedules, Batches: u.Batches})
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

// openRecords opens the records a's reads return (openRecords), its
// secret metadata too unless WithSecretMetadataSealed said otherwise.
func (a *Admin) openRecords(recs ...*store.JobRecord) {
	openRecords(a.keyRing(), !a.secretsSealed, recs...)
}

// openRecords opens, in place, the sealed values of recs that the ring
// opens: payloads, results and, with secrets, metadata. Values it cannot
// open stay sealed (tools show them as encrypted), as does everything
// without a ring.
func openRecords(keys *KeyRing, secrets bool, recs ...*store.JobRecord) {
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
		if b := rec.Brief; b != nil {
			// A listing in brief: a sealed value whose whole envelope fit
			// in the preview opens (its plain text is shorter than the
			// envelope, so it fits too); a longer one shows the start of
			// its envelope, since a cut envelope does not open.
			if len(b.Payload) == b.PayloadSize && IsSealed([]byte(b.Payload)) {
				if plain, err := keys.open([]byte(b.Payload), partPayload, refs); err == nil {
					b.Payload, b.PayloadSize = string(plain), len(plain)
				}
			}
			if len(b.Result) == b.ResultSize && IsSealed([]byte(b.Result)) {
				if plain, err := keys.open([]byte(b.Result), partResult, refs); err == nil {
					b.Result, b.ResultSize = string(plain), len(plain)
				}
			}
		}
		for k, v := range rec.Metadata {
			if secrets && sealedString(v) {
				if plain, err := keys.open([]byte(v), metadataPart(k), refs); err == nil {
					rec.Metadata[k] = string(plain)
				}
			}
		}
	}
}
