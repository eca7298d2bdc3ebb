package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// TestClaimCursors walks the cursor rules: off until listening; the first
// claim scans whole ranges; a range's next start is the earliest due
// candidate left, else the claim's now; a notification lowers a kind's
// cursors, also under a claim in flight; a reset or a stopped listener
// forgets them; a failed claim records nothing; an audit is due after the
// interval, the claim that starts it still scanning from its cursors.
func TestClaimCursors(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ts := func(d time.Duration) pgtype.Timestamptz { return pgtype.Timestamptz{Time: at(d), Valid: true} }
	none := pgtype.Timestamptz{}
	kinds := []string{"a", "b"}
	held := func(v ...pgtype.Timestamptz) []pgtype.Timestamptz { return v }

	type step struct {
		name  string
		do    func(c *claimCursors)
		begin bool                 // check what a claim's begin returns
		want  []pgtype.Timestamptz // from begin; nil: cursors off
		check func(t *testing.T, c *claimCursors)
	}
	// claimed runs one claim that ends with the given held values at now.
	claimed := func(now time.Duration, h []pgtype.Timestamptz) func(c *claimCursors) {
		return func(c *claimCursors) {
			_, cl, _ := c.begin(kinds, at(now))
			c.end(cl, kinds, h, at(now), true)
		}
	}
	allNow := held(none, none, none, none, none, none)
	tests := []struct {
		name  string
		steps []step
	}{
		{"off until listening", []step{
			{name: "claim", do: claimed(time.Second, allNow), begin: true, want: nil},
		}},
		{"first claim is full, then cursors", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "first claim", do: claimed(time.Second, held(ts(500*time.Millisecond), none, none, none, none, none))},
			{name: "next", begin: true, want: held(ts(500*time.Millisecond), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second))},
		}},
		{"notification lowers a kind", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "notify b", do: func(c *claimCursors) { c.lower("b", at(200*time.Millisecond)) }},
			{name: "notify b later", do: func(c *claimCursors) { c.lower("b", at(900*time.Millisecond)) }},
			{name: "next", begin: true, want: held(ts(time.Second), ts(time.Second), ts(time.Second),
				ts(200*time.Millisecond-time.Microsecond), ts(200*time.Millisecond-time.Microsecond), ts(200*time.Millisecond-time.Microsecond))},
		}},
		{"notification during a claim", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "claim with a notification in flight", do: func(c *claimCursors) {
				_, cl, _ := c.begin(kinds, at(2*time.Second))
				c.lower("a", at(1500*time.Millisecond)) // above a's cursor: lowers only what the claim sets
				c.end(cl, kinds, allNow, at(2*time.Second), true)
			}},
			{name: "next", begin: true, want: held(ts(1500*time.Millisecond-time.Microsecond), ts(1500*time.Millisecond-time.Microsecond),
				ts(1500*time.Millisecond-time.Microsecond), ts(2*time.Second), ts(2*time.Second), ts(2*time.Second))},
		}},
		{"reset during a claim", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "claim reset in flight", do: func(c *claimCursors) {
				_, cl, _ := c.begin(kinds, at(2*time.Second))
				c.reset()
				c.end(cl, kinds, allNow, at(2*time.Second), true)
			}},
			{name: "next", begin: true, want: make([]pgtype.Timestamptz, 6)},
		}},
		{"failed claim records nothing", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "failed", do: func(c *claimCursors) {
				_, cl, _ := c.begin(kinds, at(2*time.Second))
				c.end(cl, kinds, nil, at(2*time.Second), false)
			}},
			{name: "next", begin: true, want: held(ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second))},
		}},
		{"listener lost", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "lost", do: func(c *claimCursors) { c.listening(false) }},
			{name: "off", begin: true, want: nil, check: func(t *testing.T, c *claimCursors) { require.Empty(t, c.at) }},
		}},
		{"audit after the interval", []step{
			{name: "listen", do: func(c *claimCursors) { c.listening(true) }},
			{name: "claim", do: claimed(time.Second, allNow)},
			{name: "claim at the interval", check: func(t *testing.T, c *claimCursors) {
				from, cl, audit := c.begin(kinds, at(time.Second+auditEvery))
				c.end(cl, kinds, allNow, at(time.Second+auditEvery), true)
				require.True(t, audit, "an audit is due")
				require.Equal(t, held(ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second), ts(time.Second)), from,
					"the claim still scans from its cursors")
				require.Equal(t, at(time.Second+auditEvery), c.auditAt)
				_, cl, audit = c.begin(kinds, at(2*time.Second+auditEvery))
				c.end(cl, kinds, allNow, at(2*time.Second+auditEvery), true)
				require.False(t, audit, "the next one is auditEvery later")
			}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClaimCursors()
			c.auditAt = at(0)
			for _, st := range tt.steps {
				if st.do != nil {
					st.do(c)
				}
				if st.begin {
					got, cl, _ := c.begin(kinds, at(3*time.Second))
					require.Equal(t, st.want, got, st.name)
					c.end(cl, kinds, nil, time.Time{}, false)
				}
				if st.check != nil {
					st.check(t, c)
				}
			}
			require.Empty(t, c.inflight, "every claim ended")
		})
	}
}

// TestClaimCursorsHoldUntilCommitted: an insert of a job with a past
// run_at holds its kind's cursors down until it has committed. A claim
// that begins after the insert lowered them, and ends before the insert
// committed, did not see the row; without the hold it set the cursor to
// its own now, past the row, and a claim right after the insert returned
// did not find the job until its notification arrived.
func TestClaimCursorsHoldUntilCommitted(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	kinds := []string{"a", "b"}
	none := pgtype.Timestamptz{}
	allNow := []pgtype.Timestamptz{none, none, none, none, none, none}
	claim := func(c *claimCursors, now time.Duration) {
		_, cl, _ := c.begin(kinds, at(now))
		c.end(cl, kinds, allNow, at(now), true)
	}
	from := func(c *claimCursors) []time.Time {
		f, cl, _ := c.begin(kinds, at(time.Hour))
		c.end(cl, kinds, nil, at(time.Hour), false)
		out := make([]time.Time, len(f))
		for i, v := range f {
			out[i] = v.Time
		}
		return out
	}
	c := newClaimCursors()
	c.listening(true)
	claim(c, 500*time.Millisecond)

	release := c.hold([]store.InsertParams{{Kind: "a", RunAt: at(200 * time.Millisecond)}, {Kind: "b"}})
	claim(c, time.Second) // began after the insert's statement, ends before its commit
	low := at(200*time.Millisecond - time.Microsecond)
	require.Equal(t, []time.Time{low, low, low, at(time.Second), at(time.Second), at(time.Second)}, from(c),
		"a claim overlapping the insert must leave a's cursors below its row")

	release()
	claim(c, 2*time.Second)
	require.Equal(t, []time.Time{at(2 * time.Second), at(2 * time.Second), at(2 * time.Second),
		at(2 * time.Second), at(2 * time.Second), at(2 * time.Second)}, from(c), "released: cursors move on")

	require.NotPanics(t, func() { c.hold([]store.InsertParams{{Kind: "a"}})() }, "no explicit run_at: nothing held")
	require.Empty(t, c.holds)
}
