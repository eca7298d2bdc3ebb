package ax_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

type resize struct {
	W, H int
}

type resized struct {
	URL   string `json:"url"`
	Bytes int    `json:"bytes"`
}

// TestResults: a typed handler's result is stored with the job and
// returned by Get; RecordResult works from a plain handler; a result over
// the size limit fails the attempt with ErrInvalidResult, not the host.
func TestResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		require.NoError(t, ax.HandleResult(s, "thumb", func(_ context.Context, _ *ax.Job, r resize) (resized, error) {
			return resized{URL: "https://cdn.example/t.png", Bytes: r.W * r.H}, nil
		}))
		require.NoError(t, s.Handle("partial", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
			require.NoError(t, ax.RecordResult(ctx, map[string]int{"done": 7}))
			return errors.New("stopped half way")
		}), ax.MaxAttempts(1)))
		require.NoError(t, ax.HandleResult(s, "huge", func(context.Context, *ax.Job, struct{}) (string, error) {
			return strings.Repeat("x", store.MaxResultSize), nil
		}, ax.MaxAttempts(1)))
		start(t, s)
		ctx := t.Context()
		thumb, err := s.Schedule(ctx, "thumb", resize{W: 10, H: 20})
		require.NoError(t, err)
		partial, err := s.Schedule(ctx, "partial", nil)
		require.NoError(t, err)
		huge, err := s.Schedule(ctx, "huge", struct{}{})
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()

		rec, err := s.Get(ctx, thumb.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateSucceeded, rec.State)
		require.JSONEq(t, `{"url":"https://cdn.example/t.png","bytes":200}`, string(rec.Result))
		rec, err = s.Get(ctx, partial.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateDead, rec.State)
		require.JSONEq(t, `{"done":7}`, string(rec.Result), "a failed attempt keeps its partial result")
		rec, err = s.Get(ctx, huge.ID)
		require.NoError(t, err)
		require.Equal(t, ax.StateDead, rec.State)
		require.Contains(t, rec.Errors[0].Error, ax.ErrInvalidResult.Error())
		require.Nil(t, rec.Result)

		require.ErrorIs(t, ax.RecordResult(ctx, 1), ax.ErrNotInHandler)
		require.ErrorIs(t, ax.Then(ctx, "k", nil), ax.ErrNotInHandler)
	})
}

// TestThenChainsOnSuccessOnly: a handler's Then jobs are inserted with its
// success, never with a failure, and carry the parent's ID.
func TestThenChainsOnSuccessOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) { c.RetryPolicy = noDelay })
		steps := make(chan int, 10)
		require.NoError(t, ax.Handle(s, "step", func(ctx context.Context, j *ax.Job, n int) error {
			require.NoError(t, ax.Then(ctx, "step", n+1))
			if n == 2 && j.Attempt == 1 {
				return errors.New("step 2 fails once") // its Then must not be inserted
			}
			steps <- n
			if n == 3 {
				return ax.Permanent(errors.New("the chain stops here")) // no Then either
			}
			return nil
		}))
		start(t, s)
		first, err := s.Schedule(t.Context(), "step", 1)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		close(steps)
		var got []int
		for n := range steps {
			got = append(got, n)
		}
		require.Equal(t, []int{1, 2, 3}, got, "each step once, in order, and none after the dead one")
		ups, err := st.FollowUps(t.Context(), first.ID)
		require.NoError(t, err)
		require.Len(t, ups, 1)
		require.Equal(t, first.ID, ups[0].Parent)
	})
}

// TestFollowUpOnFinalStates: a job's FollowUp options insert their jobs
// when it ends, whatever ends it — here its handler's permanent failure,
// and a cancel before it ran.
func TestFollowUpOnFinalStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		notified := make(chan string, 4)
		require.NoError(t, ax.Handle(s, "notify", func(_ context.Context, j *ax.Job, what string) error {
			rec, err := s.Get(context.Background(), j.Parent)
			require.NoError(t, err)
			notified <- what + ":" + string(rec.State)
			return nil
		}))
		require.NoError(t, s.Handle("charge", ax.HandlerFunc(func(context.Context, *ax.Job) error {
			return ax.Permanent(errors.New("card declined"))
		})))
		start(t, s)
		opts := []ax.ScheduleOption{
			ax.FollowUp([]ax.State{ax.StateDead, ax.StateCancelled}, "notify", "failed"),
			ax.FollowUp([]ax.State{ax.StateSucceeded}, "notify", "ok"),
		}
		_, err := s.Schedule(t.Context(), "charge", nil, opts...)
		require.NoError(t, err)
		later, err := s.Schedule(t.Context(), "charge", nil, append(opts, ax.In(time.Hour))...)
		require.NoError(t, err)
		_, err = s.Cancel(t.Context(), later.ID)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		close(notified)
		var got []string
		for n := range notified {
			got = append(got, n)
		}
		require.ElementsMatch(t, []string{"failed:dead", "failed:cancelled"}, got)

		_, err = s.Schedule(t.Context(), "charge", nil, ax.FollowUp([]ax.State{ax.StateRunning}, "notify", "x"))
		require.ErrorIs(t, err, ax.ErrInvalidOption)
		_, err = s.Schedule(t.Context(), "charge", nil, ax.FollowUp(nil, "notify", "x"))
		require.ErrorIs(t, err, ax.ErrInvalidOption)
	})
}

// TestBatchCompletion: 1,000 children over two kinds, some dying; the
// completion job runs once, after the last child ended, and reads every
// child's state and result.
func TestBatchCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st, func(c *ax.Config) { c.Workers = 50 })
		require.NoError(t, ax.HandleResult(s, "square", func(_ context.Context, _ *ax.Job, n int) (int, error) {
			if n%100 == 0 {
				return 0, ax.Permanent(errors.New("no round numbers"))
			}
			return n * n, nil
		}))
		require.NoError(t, ax.HandleResult(s, "cube", func(_ context.Context, _ *ax.Job, n int) (int, error) { return n * n * n, nil }))
		type summary struct{ ok, dead, sum int }
		done := make(chan summary, 2)
		require.NoError(t, s.Handle("sum", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			var (
				sm    summary
				after uuid.UUID
			)
			for {
				page, err := s.BatchChildren(ctx, j.Batch, after, 100)
				if err != nil {
					return err
				}
				for _, c := range page {
					switch c.State {
					case ax.StateSucceeded:
						var v int
						require.NoError(t, json.Unmarshal(c.Result, &v))
						sm.ok++
						sm.sum += v
					case ax.StateDead:
						sm.dead++
					}
				}
				if len(page) < 100 {
					break
				}
				after = page[len(page)-1].ID
			}
			done <- sm
			return nil
		})))
		start(t, s)
		var b ax.Batch
		want := 0
		for i := 1; i <= 1000; i++ {
			kind := "square"
			if i%2 == 1 {
				kind = "cube"
				want += i * i * i
			} else if i%100 != 0 {
				want += i * i
			}
			b.Children = append(b.Children, ax.Request{Kind: kind, Payload: i})
		}
		b.Completion = ax.Request{Kind: "sum"}
		res, err := s.ScheduleBatch(t.Context(), b)
		require.NoError(t, err)
		require.Len(t, res.Children, 1000)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, summary{ok: 990, dead: 10, sum: want}, <-done)
		select {
		case <-done:
			t.Fatal("the completion job ran twice")
		default:
		}
		status, err := s.Batch(t.Context(), res.ID)
		require.NoError(t, err)
		require.True(t, status.Completed)
		require.Equal(t, []int{1000, 990, 10, 0}, []int{status.Total, status.Succeeded, status.Dead, status.Pending})
		rec, err := s.Get(t.Context(), res.Completion)
		require.NoError(t, err)
		require.Equal(t, ax.StateSucceeded, rec.State)
	})
}

// TestBatchOfDuplicatesStoresNothing: a batch whose children's unique keys
// are all held is reported Duplicate and not stored, so its completion job
// never runs (issue 40: it used to run at once, while the job holding the
// key was still retrying).
func TestBatchOfDuplicatesStoresNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		ran := make(chan string, 4)
		for _, kind := range []string{"deliver", "done"} {
			require.NoError(t, s.Handle(kind, ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
				ran <- j.Kind
				return nil
			})))
		}
		held, err := s.Schedule(t.Context(), "deliver", nil, ax.UniqueKey("event-1"), ax.In(time.Hour))
		require.NoError(t, err)
		res, err := s.ScheduleBatch(t.Context(), ax.Batch{
			Children:   []ax.Request{{Kind: "deliver", Options: []ax.ScheduleOption{ax.UniqueKey("event-1")}}},
			Completion: ax.Request{Kind: "done"},
		})
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, uuid.Nil, res.ID)
		require.Equal(t, uuid.Nil, res.Completion)
		require.Equal(t, []ax.ScheduleResult{{ID: held.ID, Duplicate: true}}, res.Children)
		start(t, s)
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case k := <-ran:
			t.Fatalf("%s ran: a batch of duplicates ran its completion", k)
		default:
		}
	})
}

// TestBatchRetriedChildRunsCompletionAgain: issue 40's event whose
// completion said "1 delivered, 1 dead"; the dead delivery, retried by
// hand after the batch completed, gets through, and the completion runs
// again, now seeing both delivered.
func TestBatchRetriedChildRunsCompletionAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		var down atomic.Bool
		down.Store(true)
		require.NoError(t, s.Handle("deliver", ax.HandlerFunc(func(_ context.Context, j *ax.Job) error {
			if string(j.Payload) == `"b"` && down.Load() {
				return ax.Permanent(errors.New("endpoint down"))
			}
			return nil
		})))
		type summary struct {
			batch     uuid.UUID
			delivered int
			dead      int
		}
		summaries := make(chan summary, 4)
		require.NoError(t, s.Handle("summarize", ax.HandlerFunc(func(ctx context.Context, j *ax.Job) error {
			kids, err := s.BatchChildren(ctx, j.Batch, uuid.Nil, 10)
			if err != nil {
				return err
			}
			sm := summary{batch: j.Batch}
			for _, k := range kids {
				switch k.State {
				case ax.StateSucceeded:
					sm.delivered++
				case ax.StateDead:
					sm.dead++
				}
			}
			summaries <- sm
			return nil
		})))
		start(t, s)
		res, err := s.ScheduleBatch(t.Context(), ax.Batch{
			Children:   []ax.Request{{Kind: "deliver", Payload: "a"}, {Kind: "deliver", Payload: "b"}},
			Completion: ax.Request{Kind: "summarize"},
		})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		synctest.Wait()
		next := func(what string) summary { // never blocks: the hosts' timers run in the bubble
			select {
			case sm := <-summaries:
				return sm
			default:
				t.Fatalf("no completion: %s", what)
				return summary{}
			}
		}
		require.Equal(t, summary{batch: res.ID, delivered: 1, dead: 1}, next("the batch completed"))

		down.Store(false)
		_, err = s.RunNow(t.Context(), res.Children[1].ID)
		require.NoError(t, err)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, summary{batch: res.ID, delivered: 2}, next("the retried child ended: the completion must run again"))
		select {
		case sm := <-summaries:
			t.Fatalf("a third completion: %+v", sm)
		default:
		}
		status, err := s.Batch(t.Context(), res.ID)
		require.NoError(t, err)
		require.True(t, status.Completed)
		require.Equal(t, []int{2, 0, 0}, []int{status.Succeeded, status.Dead, status.Pending})
	})
}

// TestAdminFollowUps: an Admin lists what a job's end inserted.
func TestAdminFollowUps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		s := newScheduler(t, st)
		require.NoError(t, s.Handle("k", ax.HandlerFunc(func(context.Context, *ax.Job) error { return nil })))
		start(t, s)
		res, err := s.Schedule(t.Context(), "k", nil, ax.FollowUp([]ax.State{ax.StateSucceeded}, "after", "x"))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		admin, err := ax.NewAdmin(ax.AdminConfig{Store: st})
		require.NoError(t, err)
		ups, err := admin.FollowUps(t.Context(), res.ID)
		require.NoError(t, err)
		require.Len(t, ups, 1)
		require.Equal(t, "after", ups[0].Kind)
		require.Equal(t, res.ID, ups[0].Parent)
	})
}
