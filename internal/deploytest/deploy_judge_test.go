package deploytest

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestJudge: the verdict counts what the scenarios fail on — a scheduled
// job missing or never run, a run after a written success, a third run, a
// fencing token that did not grow — and lets a second run with a higher
// token after an unwritten outcome pass.
func TestJudge(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	at := time.Unix(0, 0)
	run := func(id uuid.UUID, attempt int, fence int64) execution {
		at = at.Add(time.Second)
		return execution{job: id, node: "h", attempt: attempt, fence: fence, started: at, outcome: "ok"}
	}
	done := map[uuid.UUID]string{a: "succeeded", b: "succeeded"}
	cases := []struct {
		name  string
		ids   []uuid.UUID
		state map[uuid.UUID]string
		execs map[uuid.UUID][]execution
		acks  map[acked]bool
		want  verdict
	}{
		{name: "each once", ids: []uuid.UUID{a, b}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1)}, b: {run(b, 1, 1)}},
			want:  verdict{scheduled: 2, run: 2}},
		{name: "missing from the store", ids: []uuid.UUID{a, b}, state: map[uuid.UUID]string{a: "succeeded"},
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1)}},
			want:  verdict{scheduled: 2, run: 1, lost: 1}},
		{name: "never run", ids: []uuid.UUID{a, b}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1)}},
			want:  verdict{scheduled: 2, run: 1, lost: 1}},
		{name: "second run after a lost outcome, higher token", ids: []uuid.UUID{a}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1), run(a, 2, 2)}},
			want:  verdict{scheduled: 1, run: 1, twice: 1}},
		{name: "second run after a written success", ids: []uuid.UUID{a}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1), run(a, 2, 2)}}, acks: map[acked]bool{{a, 1, "h"}: true},
			want: verdict{scheduled: 1, run: 1, twice: 1, afterAck: 1}},
		{name: "another host's success of the same attempt number", ids: []uuid.UUID{a}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1), run(a, 2, 2)}}, acks: map[acked]bool{{a, 1, "other"}: true},
			want: verdict{scheduled: 1, run: 1, twice: 1}},
		{name: "token not higher", ids: []uuid.UUID{a}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1), run(a, 1, 1)}},
			want:  verdict{scheduled: 1, run: 1, twice: 1, fenceNotUp: 1}},
		{name: "three runs", ids: []uuid.UUID{a}, state: done,
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1), run(a, 2, 2), run(a, 3, 3)}},
			want:  verdict{scheduled: 1, run: 1, twice: 1, thrice: 1}},
		{name: "not succeeded", ids: []uuid.UUID{a}, state: map[uuid.UUID]string{a: "dead"},
			execs: map[uuid.UUID][]execution{a: {run(a, 1, 1)}},
			want:  verdict{scheduled: 1, run: 1, notDone: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := judge(c.ids, 0, c.state, c.execs, c.acks)
			got.lostIDs, got.breachIDs = nil, nil
			if got.String() != c.want.String() {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
