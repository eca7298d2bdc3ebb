package ax_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// TestFindByIDPrefix: a prefix names one range of the ID order, found at
// both ends of it, with or without dashes, in any case, cut at an
// ellipsis; a malformed prefix or limit is refused.
func TestFindByIDPrefix(t *testing.T) {
	st := memstore.New()
	ids := []uuid.UUID{
		uuid.MustParse("00000000-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000002"),
		uuid.MustParse("0a0b0c0e-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0c0000-0000-7000-8000-000000000001"),
		uuid.MustParse("ffffffff-ffff-7fff-bfff-ffffffffffff"),
	}
	for _, id := range ids {
		_, err := st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "report", Payload: []byte(`{}`),
			Priority: store.PriorityNormal, MaxAttempts: 1, Delay: 1 << 40}})
		require.NoError(t, err)
	}
	a := newAdmin(t, st)
	cases := []struct {
		name   string
		prefix string
		limit  int
		want   []uuid.UUID
		err    error
	}{
		{"unique", "0a0b0c0e", 0, ids[3:4], nil},
		{"ambiguous", "0a0b", 0, ids[1:4], nil},
		{"ambiguous beyond the limit", "0a0b", 2, ids[1:3], nil},
		{"none", "0b0b", 0, []uuid.UUID{}, nil},
		{"zeros", "0000", 0, ids[0:1], nil},
		{"top", "ffff", 0, ids[5:6], nil},
		{"dashes", "0a0b0c0d-0000-7000-8000-00000000000", 0, ids[1:3], nil},
		{"whole ID", ids[2].String(), 0, ids[2:3], nil},
		{"capitals, spaces and ellipsis", " 0A0B0C0E…000001 ", 0, ids[3:4], nil},
		{"three dots", "0a0c...", 0, ids[4:5], nil},
		{"too short", "0a0", 0, nil, ax.ErrInvalidIDPrefix},
		{"too short without dashes", "0a-0-", 0, nil, ax.ErrInvalidIDPrefix},
		{"empty", "", 0, nil, ax.ErrInvalidIDPrefix},
		{"not hexadecimal", "0a0x", 0, nil, ax.ErrInvalidIDPrefix},
		{"too long", ids[2].String() + "0", 0, nil, ax.ErrInvalidIDPrefix},
		{"negative limit", "0a0b", -1, nil, ax.ErrInvalidOption},
		{"limit too large", "0a0b", store.MaxListLimit + 1, nil, ax.ErrInvalidOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := a.FindByIDPrefix(t.Context(), c.prefix, c.limit)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, jobIDs(got))
		})
	}
	_, err := newAdmin(t, bareStore{st}).FindByIDPrefix(t.Context(), "0a0b", 0)
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
}

// TestFindByIDPrefixBrief: the same jobs as FindByIDPrefix, in brief:
// the start of the payload and its size, not the payload.
func TestFindByIDPrefixBrief(t *testing.T) {
	st := memstore.New()
	ids := []uuid.UUID{
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000001"),
		uuid.MustParse("0a0b0c0d-0000-7000-8000-000000000002"),
		uuid.MustParse("0a0c0000-0000-7000-8000-000000000001"),
	}
	for _, id := range ids {
		_, err := st.Insert(t.Context(), []store.InsertParams{{ID: id, Kind: "report", Payload: []byte(`{"rows":[1,2,3,4,5,6]}`),
			Priority: store.PriorityNormal, MaxAttempts: 1, Delay: 1 << 40}})
		require.NoError(t, err)
	}
	a := newAdmin(t, st)
	got, err := a.FindByIDPrefixBrief(t.Context(), "0a0b", 0, 8)
	require.NoError(t, err)
	require.Equal(t, ids[:2], jobIDs(got))
	for _, j := range got {
		require.Nil(t, j.Payload)
		require.Equal(t, &store.Brief{Payload: `{"rows":`, PayloadSize: 22}, j.Brief)
	}
	for _, n := range []int{0, -1, store.MaxPreviewBytes + 1} {
		_, err := a.FindByIDPrefixBrief(t.Context(), "0a0b", 0, n)
		require.ErrorIs(t, err, ax.ErrInvalidOption, "preview %d", n)
	}
}
