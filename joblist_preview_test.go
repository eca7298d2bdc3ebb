package ax_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// TestAdminListPreview: ListOptions.PreviewBytes lists the jobs in brief
// (the start and size of the payload, not the payload), Get reads a job
// whole, and a preview length out of range is refused with
// ErrInvalidOption.
func TestAdminListPreview(t *testing.T) {
	st := newMemstore()
	a := newAdmin(t, st)
	payload := `{"blob":"` + strings.Repeat("x", 5000) + `"}`
	id := uuid.Must(uuid.NewV7())
	_, err := st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "preview", Payload: []byte(payload), Priority: store.PriorityNormal, MaxAttempts: 1}})
	require.NoError(t, err)
	l, err := a.List(t.Context(), ax.ListOptions{Filter: ax.JobFilter{Kinds: []string{"preview"}}, PreviewBytes: 16})
	require.NoError(t, err)
	require.Len(t, l.Jobs, 1)
	j := l.Jobs[0]
	require.Nil(t, j.Payload)
	require.Equal(t, &store.Brief{Payload: payload[:16], PayloadSize: len(payload)}, j.Brief)
	whole, err := a.Get(t.Context(), id)
	require.NoError(t, err)
	require.JSONEq(t, payload, string(whole.Payload))
	require.Nil(t, whole.Brief)

	for _, n := range []int{-1, store.MaxPreviewBytes + 1} {
		_, err := a.List(t.Context(), ax.ListOptions{PreviewBytes: n})
		require.True(t, errors.Is(err, ax.ErrInvalidOption), "preview %d: %v", n, err)
	}
}
