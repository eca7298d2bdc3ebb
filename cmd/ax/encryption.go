package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// Encryption at rest (ax.Config.Keys) on the command line. The global flag
// --encryption-keys FILE (default $AX_ENCRYPTION_KEYS) names the cluster's
// key ring, a JSON file (ax.ParseKeyRing). With it, jobs list and show and
// ax serve show sealed payloads, results and secret metadata plain;
// without it they show "encrypted (key ID)". It is a file of its own, not
// lines of --keys-file: those keys sign API requests and are handed to
// API clients, while the ring's keys must reach no one but the hosts.
//
//	ax jobs reencrypt [--batch N] [--after ID]   re-seal jobs with the current key
//	    [--seal-plain [--secret-metadata K,...]] and seal the plain ones
//	ax keys usage                                jobs, templates and batch completions per key
//	ax keys remove ID                            drop a key from the file, once unused

// keyRing returns the key ring of --encryption-keys, or nil without one.
func (e *env) keyRing() (*ax.KeyRing, error) {
	path := e.global.encryptionKeys
	if path == "" {
		return nil, nil
	}
	r, err := ax.LoadKeyRing(path)
	if err != nil {
		return nil, usageErrorf("--encryption-keys: %v", err)
	}
	return r, nil
}

// shown is a payload, result or metadata value as the tables print it:
// "encrypted (key ID)" for a value the ring did not open.
func shown[T []byte | json.RawMessage | string](v T) string {
	if id := ax.SealedKeyID(v); id != "" {
		return fmt.Sprintf("encrypted (key %s)", id)
	}
	return string(v)
}

// reencryptResult is the JSON of jobs reencrypt.
type reencryptResult struct {
	Key        string `json:"key"`
	Scanned    int64  `json:"scanned"`
	Resealed   int64  `json:"resealed"`
	Changed    int64  `json:"changed"`
	Unopenable int64  `json:"unopenable"`
	Sealed     int64  `json:"sealed"`
	LeftPlain  int64  `json:"left_plain"`
	Last       string `json:"last,omitempty"`
}

func jobsReencrypt(fs *flag.FlagSet) func(*env, []string) error {
	batch := fs.Int("batch", ax.DefaultReencryptBatch, "jobs read and re-sealed per store call")
	after := fs.String("after", "", "resume after this job ID (the last one a killed run printed)")
	sealPlain := fs.Bool("seal-plain", false, "also seal the values stored plain (jobs from before the keys); once every host has the ring")
	secretMD := fs.String("secret-metadata", "", "with --seal-plain, comma-separated metadata keys whose plain values are sealed too")
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		var opts ax.ReencryptOptions
		opts.BatchSize = *batch
		opts.SealPlain = *sealPlain
		if *secretMD != "" {
			if !*sealPlain {
				return usageErrorf("--secret-metadata needs --seal-plain")
			}
			for _, k := range strings.Split(*secretMD, ",") {
				if k = strings.TrimSpace(k); k != "" {
					opts.SecretMetadata = append(opts.SecretMetadata, k)
				}
			}
		}
		if *after != "" {
			id, err := uuid.Parse(*after)
			if err != nil {
				return usageErrorf("--after: %q is not a job ID", *after)
			}
			opts.After = id
		}
		ring, err := e.keyRing()
		if err != nil {
			return err
		}
		if ring == nil {
			return usageErrorf("give --encryption-keys (or AX_ENCRYPTION_KEYS)")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		if !e.global.json {
			// One line per batch on stderr: the last one printed is where a
			// killed run resumes (--after).
			opts.Progress = func(p ax.ReencryptProgress) {
				if opts.SealPlain {
					fmt.Fprintf(e.stderr, "scanned %d, re-sealed %d (%d were plain), last %s\n", p.Scanned, p.Resealed, p.Sealed, p.Last)
					return
				}
				fmt.Fprintf(e.stderr, "scanned %d, re-sealed %d, last %s\n", p.Scanned, p.Resealed, p.Last)
			}
		}
		p, err := a.Reencrypt(e.ctx, opts)
		res := reencryptResult{Key: ring.Current(), Scanned: p.Scanned, Resealed: p.Resealed, Changed: p.Changed, Unopenable: p.Unopenable,
			Sealed: p.Sealed, LeftPlain: p.LeftPlain}
		if p.Last != uuid.Nil {
			res.Last = p.Last.String()
		}
		if err != nil {
			return fmt.Errorf("%w (resume with --after %s)", err, res.Last)
		}
		if e.global.json {
			return printJSON(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "%d job(s) scanned, %d re-sealed with key %s, %d changed meanwhile (run again), %d not opened by the ring\n",
			res.Scanned, res.Resealed, res.Key, res.Changed, res.Unopenable)
		if opts.SealPlain {
			fmt.Fprintf(e.stdout, "%d of the re-sealed held plain values, now sealed; %d job(s) keep plain values that cannot be sealed (see the log)\n",
				res.Sealed, res.LeftPlain)
		}
		return nil
	}
}

// keyUsage is one row of keys usage. Batches counts the completion jobs
// of running batches, held apart until their last child ends (not in
// Jobs).
type keyUsage struct {
	Key       string `json:"key"`
	Jobs      int64  `json:"jobs"`
	Schedules int    `json:"schedules"`
	Batches   int64  `json:"batches"`
	InRing    bool   `json:"in_ring"`
}

func keysUsage(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		ring, err := e.keyRing()
		if err != nil {
			return err
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		uses, err := a.KeyUses(e.ctx)
		if err != nil {
			return err
		}
		ids := map[string]bool{}
		for id := range uses {
			ids[id] = true
		}
		if ring != nil {
			for _, id := range ring.IDs() {
				ids[id] = true
			}
		}
		rows := []keyUsage{}
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range ids {
				if !yield(id) {
					return
				}
			}
		}) {
			u := uses[id]
			rows = append(rows, keyUsage{Key: id, Jobs: u.Jobs, Schedules: u.Schedules, Batches: u.Batches,
				InRing: ring != nil && ring.Has(id)})
		}
		if e.global.json {
			return printJSON(e.stdout, rows)
		}
		t := newTable(e.stdout, "KEY", "JOBS", "SCHEDULES", "BATCHES", "IN RING")
		for _, r := range rows {
			in := "no"
			if r.InRing {
				in = "yes"
				if r.Key == ring.Current() {
					in = "current"
				}
			}
			t.row(r.Key, fmt.Sprint(r.Jobs), fmt.Sprint(r.Schedules), fmt.Sprint(r.Batches), in)
		}
		return t.flush()
	}
}

func keysRemove(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one key ID")
		}
		id := args[0]
		path := e.global.encryptionKeys
		ring, err := e.keyRing()
		if err != nil {
			return err
		}
		if ring == nil {
			return usageErrorf("give --encryption-keys (or AX_ENCRYPTION_KEYS): the file to remove the key from")
		}
		if !ring.Has(id) {
			return fmt.Errorf("key %q: %w: not in %s", id, errNotFound, path)
		}
		if id == ring.Current() {
			return usageErrorf("key %q is the current key: make another key current first", id)
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		if err := a.CheckKeyRemoval(e.ctx, id); err != nil {
			return err
		}
		if err := dropKey(path, id); err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, map[string]string{"key": id, "file": path})
		}
		fmt.Fprintf(e.stdout, "key %s removed from %s: no stored job needs it\n", id, path)
		return nil
	}
}

// dropKey rewrites the key ring file at path without key id, atomically
// (a temporary file renamed over it, with its permissions).
func dropKey(path, id string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var keys []map[string]json.RawMessage
	if err := json.Unmarshal(f["keys"], &keys); err != nil {
		return fmt.Errorf("%s: keys: %w", path, err)
	}
	keys = slices.DeleteFunc(keys, func(k map[string]json.RawMessage) bool {
		var kid string
		_ = json.Unmarshal(k["id"], &kid)
		return kid == id
	})
	if f["keys"], err = json.Marshal(keys); err != nil {
		return err
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if _, err := ax.ParseKeyRing(out); err != nil {
		return errors.New("the key ring would not read back; file left as it was")
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(out, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// encryptionProbe is how many of the newest jobs clusterEncrypts reads.
const encryptionProbe = 200

// clusterEncrypts reports whether the cluster on st encrypts its jobs, as
// far as the store tells: a description of a running node that holds keys
// (its heartbeat lists their IDs: store.NodeParams.KeyIDs), of a sealed
// value among the newest stored jobs, or of a periodic schedule's template
// ("job ID is sealed with key K"), or "" when none is (a store without a
// node registry or listings tells nothing). The nodes answer for a
// cluster whose newest jobs happen to be plain; the jobs for one whose
// hosts have all stopped.
func clusterEncrypts(ctx context.Context, st store.Store) (string, error) {
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	nodes, err := admin.Nodes(ctx)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return "", fmt.Errorf("check whether the cluster encrypts: %w", err)
	}
	for _, n := range nodes {
		if n.State == ax.NodeRunning && len(n.KeyIDs) > 0 {
			return fmt.Sprintf("node %s holds keys %s", n.Name, strings.Join(n.KeyIDs, ", ")), nil
		}
	}
	if _, ok := st.(store.JobInspector); !ok {
		return "", nil
	}
	list, err := admin.List(ctx, ax.ListOptions{Order: ax.NewestFirst, Limit: encryptionProbe})
	if err != nil {
		return "", fmt.Errorf("check whether the cluster encrypts: %w", err)
	}
	for _, j := range list.Jobs {
		if k := sealedKeyOf(j.Payload, j.Result, j.Metadata); k != "" {
			return fmt.Sprintf("job %s is sealed with key %s", j.ID, k), nil
		}
	}
	ss, err := admin.Schedules(ctx)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return "", fmt.Errorf("check whether the cluster encrypts: %w", err)
	}
	for _, sc := range ss {
		if sc.Job == nil {
			continue
		}
		if k := sealedKeyOf(sc.Job.Payload, nil, sc.Job.Metadata); k != "" {
			return fmt.Sprintf("periodic schedule %s is sealed with key %s", sc.Name, k), nil
		}
	}
	return "", nil
}

// sealedKeyOf returns the key of the first sealed value among payload,
// result and md, or "".
func sealedKeyOf(payload, result []byte, md map[string]string) string {
	for _, v := range [][]byte{payload, result} {
		if k := ax.SealedKeyID(v); k != "" {
			return k
		}
	}
	for _, v := range md {
		if k := ax.SealedKeyID(v); k != "" {
			return k
		}
	}
	return ""
}
