package sqlitestore

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueryPlans checks that each hot statement searches the index made
// for it, so that its cost grows with the rows it returns, not with the
// history or the far-future backlog.
func TestQueryPlans(t *testing.T) {
	st, err := Open(t.Context(), filepath.Join(t.TempDir(), "ax.db"))
	require.NoError(t, err)
	defer st.Close()
	cases := []struct {
		q    query
		args []any
		want string
	}{
		{qClaimCandidates, []any{"k", 1, 10}, "SEARCH jobs USING INDEX jobs_claim (kind=? AND priority=?)"},
		{qClaimUpdate, []any{"n", 0, 0, "[1]"}, "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"},
		{qClaimNext, []any{"k", 1}, "SEARCH jobs USING INDEX jobs_claim (kind=? AND priority=?)"},
		{qHolder, []any{"k"}, "SEARCH jobs USING INDEX jobs_ukey (ukey=?)"},
		{qRescueSelect, []any{0, 10}, "SEARCH jobs USING INDEX jobs_lease (lease_expires_at<?)"},
		{qPrune, []any{0, 10}, "SEARCH jobs USING INDEX jobs_finished (finished_at<?)"},
		{qLoadRunning, []any{`["01"]`}, "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"},
		{qExtend, []any{0, `[["01","02"]]`}, "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"},
		{qSaveEnded, []any{`[[1,"succeeded",0,1,null,0,null]]`}, "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"},
		{qFollowUps, []any{[]byte{1}}, "SEARCH jobs USING INDEX jobs_parent (parent=?)"},
		{qBatchChildren, []any{[]byte{1}, []byte{}, []byte{2}, 10}, "SEARCH jobs USING INDEX jobs_batch (batch=? AND id>?)"},
		// Flow control (migration 0003).
		{qFlowCands, []any{"k", 1, 0, 0, []byte{}, 64}, "SEARCH jobs USING INDEX jobs_claim (kind=? AND priority=? AND "},
		{qPartRunning, []any{"k", "p"}, "jobs_running (kind=? AND partition_key=?)"},
		{qSeqHead, []any{"k", "s"}, "SEARCH jobs USING INDEX jobs_sequence (kind=? AND sequence_key=?)"},
		{qSeqRunning, []any{"k", "s"}, "jobs_sequence (kind=? AND sequence_key=?)"},
		{qKindHasSeq, []any{"k"}, "jobs_sequence (kind=?"},
	}
	for _, c := range cases {
		rows, err := st.w.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+queryText[c.q], c.args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		joined := strings.Join(plan, "; ")
		require.Contains(t, joined, c.want, "%s", queryText[c.q])
		require.NotContains(t, joined, "SCAN jobs", "%s", queryText[c.q])
	}
}
