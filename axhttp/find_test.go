package axhttp

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestFindJob: a whole ID or a prefix that one of the newest jobs has
// opens the job; a prefix several have lists them; none, or a malformed
// one, says so.
func TestFindJob(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	var ids []uuid.UUID
	for range 20 {
		j, err := f.s.Schedule(ctx, "email", nil)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	b := f.browser()
	b.login("dash", readerSecret)
	last := ids[len(ids)-1].String()
	// The shortest prefix only the last job has.
	unique := ""
	for n := minPrefix; n <= len(last); n++ {
		p, count := last[:n], 0
		for _, id := range ids {
			if strings.HasPrefix(id.String(), p) {
				count++
			}
		}
		if count == 1 {
			unique = p
			break
		}
	}
	cases := []struct {
		name, q  string
		status   int
		location string
		contains string
	}{
		{"whole ID", last, 303, "/ax/jobs/" + last, ""},
		{"whole ID in capitals", strings.ToUpper(last), 303, "/ax/jobs/" + last, ""},
		{"unique prefix", unique, 303, "/ax/jobs/" + last, ""},
		{"as a page shows it", unique + "…" + last[30:], 303, "/ax/jobs/" + last, ""},
		{"shared prefix", last[:4], 200, "", "of the newest 20 jobs start with"},
		{"no match", "ffff", 404, "", "None of the newest 20 jobs starts with"},
		{"unknown whole ID", uuid.NewString(), 404, "", "No job has this ID."},
		{"too short", last[:3], 400, "", "at least its first 4"},
		{"not hexadecimal", "<script>", 400, "", "at least its first 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := b.get("/find?id=" + url.QueryEscape(c.q))
			require.Equal(t, c.status, res.StatusCode, body)
			if c.location != "" {
				require.Equal(t, c.location, res.Header.Get("Location"))
			}
			require.Contains(t, body, c.contains)
			require.NotContains(t, body, "<script>")
		})
	}
	_, page := b.get("/jobs")
	require.Contains(t, page, `id="find-form"`)
}
