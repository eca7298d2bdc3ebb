// Command encryption shows encryption at rest (ax.Config.Keys): payloads,
// results and secret metadata are sealed before they reach the store and
// opened only by hosts and tools holding the key ring; jobs stored before
// encryption was turned on are sealed by a pass of Admin.Reencrypt; a new
// current key rotates them, and an old key leaves the ring once no job
// needs it.
//
//	go run ./encryption
//
// It runs on memstore; on PostgreSQL or SQLite nothing changes but the
// store.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/google/uuid"
)

// Welcome is a job payload with personal data in it.
type Welcome struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "encryption:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	// In production the ring comes from a secret store or a file
	// (ax.LoadKeyRing, the JSON that ax.MarshalKeyRing writes); every
	// host and tool of the cluster gets the same one.
	k1, err := ax.GenerateKey("2026-11")
	if err != nil {
		return err
	}
	ringNov, err := ax.NewKeyRing(k1)
	if err != nil {
		return err
	}
	st := memstore.New()
	defer st.Close()

	// October: no keys yet, so this job's payload is stored plain.
	october, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	if _, err := october.Schedule(ctx, "welcome", Welcome{Email: "bob@example.com", Name: "Bob"}, ax.In(time.Hour)); err != nil {
		return err
	}
	if err := october.Stop(ctx); err != nil {
		return err
	}

	// November: jobs are sealed with 2026-11.
	s, err := ax.New(ax.Config{Store: st, Keys: ringNov, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	// Once every host holds the ring, one pass seals the jobs stored plain
	// before it (ax jobs reencrypt --seal-plain does the same).
	sealed, err := s.Admin().Reencrypt(ctx, ax.ReencryptOptions{SealPlain: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sealed %d job(s) stored before encryption was on\n", sealed.Sealed)
	res, err := s.Schedule(ctx, "welcome", Welcome{Email: "ada@example.com", Name: "Ada"},
		ax.In(time.Hour), ax.SecretMetadata(map[string]string{"invite": "tok-123"}))
	if err != nil {
		return err
	}
	if err := s.Stop(ctx); err != nil {
		return err
	}
	raw, err := st.Get(ctx, res.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "stored payload: %.60s...\n", raw.Payload)
	fmt.Fprintf(out, "sealed with key %s; the store never saw the e-mail address\n", ax.SealedKeyID(raw.Payload))

	// December: a new current key; 2026-11 still opens November's jobs.
	// (On a cluster, in two rolling deploys: first every host gets 2026-12
	// as an older key, then every host makes it current; docs/guide.md.)
	k2, err := ax.GenerateKey("2026-12")
	if err != nil {
		return err
	}
	ringDec, err := ax.NewKeyRing(k2, k1)
	if err != nil {
		return err
	}
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ringDec, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	rec, err := admin.Get(ctx, res.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "read with the ring: %s (invite %s)\n", rec.Payload, rec.Metadata["invite"])

	// 2026-11 cannot leave the ring while a job needs it...
	var inUse *ax.KeyInUseError
	if err := admin.CheckKeyRemoval(ctx, "2026-11"); errors.As(err, &inUse) {
		fmt.Fprintf(out, "removing 2026-11 refused: %d job(s) need it\n", inUse.Jobs)
	}
	// ...until the stored jobs are re-sealed with the current key, in
	// batches, while the cluster runs (ax jobs reencrypt does the same).
	p, err := admin.Reencrypt(ctx, ax.ReencryptOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "re-encrypted %d of %d job(s) with 2026-12\n", p.Resealed, p.Scanned)
	if err := admin.CheckKeyRemoval(ctx, "2026-11"); err != nil {
		return err
	}
	fmt.Fprintln(out, "2026-11 can leave the ring")

	// January's hosts hold 2026-12 alone, and run the job.
	ringJan, err := ax.NewKeyRing(k2)
	if err != nil {
		return err
	}
	w, err := ax.New(ax.Config{Store: st, Keys: ringJan, Logger: zap.NewNop(), PollInterval: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	done := make(chan string, 1)
	if err := ax.HandleResult(w, "welcome", func(ctx context.Context, j *ax.Job, p Welcome) (string, error) {
		done <- fmt.Sprintf("handler: welcome %s <%s>, invite %s", p.Name, p.Email, j.Metadata["invite"])
		return "sent to " + p.Email, nil // the result is sealed too
	}); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop(context.Background())
	if _, err := w.Admin().RetryJobs(ctx, ax.JobFilter{IDs: []uuid.UUID{res.ID}}); err != nil {
		return err
	}
	select {
	case line := <-done:
		fmt.Fprintln(out, line)
	case <-time.After(10 * time.Second):
		return errors.New("the job did not run")
	}
	for {
		rec, err := w.Get(ctx, res.ID)
		if err != nil {
			return err
		}
		if rec.State == store.StateSucceeded {
			fmt.Fprintf(out, "result: %s (stored sealed with %s)\n", rec.Result, keyOf(ctx, st, res.ID))
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// keyOf returns the key that sealed the stored result of job id.
func keyOf(ctx context.Context, st store.Store, id uuid.UUID) string {
	rec, err := st.Get(ctx, id)
	if err != nil {
		return err.Error()
	}
	return ax.SealedKeyID(rec.Result)
}
