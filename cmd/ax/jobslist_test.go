package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// bigJobs inserts n dead jobs of kind "bulk.mail" with payloads of
// store.MaxPayloadSize (1 MiB) and a long error.
func bigJobs(t *testing.T, st store.Store, n int) {
	t.Helper()
	ctx := t.Context()
	blob := strings.Repeat("0123456789abcdef", store.MaxPayloadSize/16)[:store.MaxPayloadSize-len(`{"blob":""}`)]
	payload := []byte(`{"blob":"` + blob + `"}`)
	ps := make([]store.InsertParams, n)
	for i := range ps {
		ps[i] = store.InsertParams{ID: uuid.Must(uuid.NewV7()), Kind: "bulk.mail", Payload: payload, Priority: store.PriorityNormal, MaxAttempts: 1}
	}
	_, err := st.Insert(ctx, ps)
	require.NoError(t, err)
	res, err := st.Claim(ctx, &store.ClaimParams{Owner: "worker-1", Limit: n, LeaseDuration: time.Minute,
		Kinds: []store.KindLimit{{Kind: "bulk.mail", Limit: n}}})
	require.NoError(t, err)
	fs := make([]store.FinishParams, len(res.Jobs))
	for i, j := range res.Jobs {
		fs[i] = store.FinishParams{Lease: store.Lease{ID: j.ID, Token: j.LeaseToken}, Outcome: store.OutcomeDead,
			Error: "smtp: 550 mailbox full" + strings.Repeat(" and more", 3000)}
	}
	_, err = st.Finish(ctx, fs)
	require.NoError(t, err)
}

// TestJobsListPreview: jobs list reads jobs in brief, so a page over 1 MB
// payloads prints a few hundred bytes per job: their size, the first
// --preview bytes of the payload (none with 0), the start of the latest
// error. With --json the jobs are in brief as GET /api/v1/jobs lists
// them.
func TestJobsListPreview(t *testing.T) {
	const jobs = 20
	// perJob bounds what a table row or a JSON record holds.
	const perJob = 2 << 10
	c := newCluster(t)
	bigJobs(t, c.st, jobs)
	cases := []struct {
		name  string
		args  []string
		bound int
		out   []string // substrings of stdout
		not   []string // not in stdout
	}{
		{"default", []string{"jobs", "list", "--kind", "bulk.mail"}, jobs * 300,
			[]string{"SIZE", "PAYLOAD", "1.0 MiB", `{"blob":"0123456789abcdef0123456789abcdef0123456789abcdef0123456…`, "smtp: 550 mailbox full and more"},
			[]string{`{"blob":"0123456789abcdef0123456789abcdef0123456789abcdef01234567`}},
		{"8 bytes", []string{"jobs", "list", "--kind", "bulk.mail", "--preview", "8"}, jobs * 250,
			[]string{"1.0 MiB", `{"blob":…`}, []string{`{"blob":"`}},
		{"none", []string{"jobs", "list", "--kind", "bulk.mail", "--preview", "0"}, jobs * 250,
			[]string{"SIZE", "1.0 MiB", "smtp: 550 mailbox full"}, []string{"PAYLOAD", `{"blob"`}},
		{"small payloads", []string{"jobs", "list", "--kind", "email.send", "--state", "dead"}, 3 * 300,
			[]string{"24 B", `{"to":"ada@example.com"}`}, []string{`ada@example.com"}…`}},
		{"json", []string{"jobs", "list", "--kind", "bulk.mail", "--json", "--preview", "16"}, jobs * perJob,
			[]string{`"payload": null`, `"payload": "{\"blob\":\"0123456"`, `"payload_size": 1048576`}, []string{`"payload": "{\"blob\":\"01234567`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := c.ax(t, nil, tc.args...)
			require.Zero(t, code, errOut)
			t.Logf("%d bytes", len(out))
			require.Less(t, len(out), tc.bound)
			for _, s := range tc.out {
				require.Contains(t, out, s)
			}
			for _, s := range tc.not {
				require.NotContains(t, out, s)
			}
		})
	}
	out, errOut, code := c.ax(t, nil, "jobs", "list", "--kind", "bulk.mail", "--json", "--preview", "0")
	require.Zero(t, code, errOut)
	var l ax.JobList
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Len(t, l.Jobs, jobs)
	for _, j := range l.Jobs {
		require.Equal(t, "null", string(j.Payload))
		require.Equal(t, store.Brief{PayloadSize: store.MaxPayloadSize, Errors: 1}, *j.Brief)
		require.Len(t, j.Errors, 1)
		require.Len(t, j.Errors[0].Error, 256, "the start of the latest error")
	}
}

// TestJobsListPreviewRange: --preview takes 0 to store.MaxPreviewBytes.
func TestJobsListPreviewRange(t *testing.T) {
	c := newCluster(t)
	cases := []struct {
		preview string
		code    int
	}{
		{"0", exitOK},
		{"65536", exitOK},
		{"-1", exitUsage},
		{"65537", exitUsage},
		{"x", exitUsage},
	}
	for _, tc := range cases {
		_, errOut, code := c.ax(t, nil, "jobs", "list", "--preview", tc.preview)
		require.Equal(t, tc.code, code, "--preview %s: %s", tc.preview, errOut)
	}
}
