package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store"
)

// testKindDefaulter checks the optional KindDefaulter: declared defaults
// read back (only those asked for, ordered by kind), a later declaration
// replacing an earlier one (the last writer wins), and invalid
// declarations refused whole.
func testKindDefaulter(t *testing.T, newStore NewStoreFunc) {
	skipUnless[store.KindDefaulter](t, newStore)
	t.Run("DeclareAndRead", func(t *testing.T) {
		st := newStore(t)
		kd := as[store.KindDefaulter](t, st)
		ctx := t.Context()
		got, err := kd.KindDefaults(ctx, []string{"kd.a"})
		require.NoError(t, err)
		require.Empty(t, got, "nothing declared yet")

		before := storeNow(t, st)
		require.NoError(t, kd.DeclareKindDefaults(ctx, []store.KindDefaults{
			{Kind: "kd.b", MaxAttempts: 1, Priority: store.PriorityLow},
			{Kind: "kd.a", MaxAttempts: 7, Priority: store.PriorityHigh},
		}))
		after := storeNow(t, st)
		got, err = kd.KindDefaults(ctx, []string{"kd.b", "kd.none", "kd.a", "kd.b"})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, "kd.a", got[0].Kind)
		require.Equal(t, 7, got[0].MaxAttempts)
		require.Equal(t, store.PriorityHigh, got[0].Priority)
		require.Equal(t, "kd.b", got[1].Kind)
		require.Equal(t, 1, got[1].MaxAttempts)
		require.Equal(t, store.PriorityLow, got[1].Priority)
		for _, d := range got {
			requireBetween(t, before, after, d.UpdatedAt, "UpdatedAt of a declaration")
		}

		// The last writer wins, kind by kind.
		require.NoError(t, kd.DeclareKindDefaults(ctx, []store.KindDefaults{{Kind: "kd.b", MaxAttempts: 3, Priority: store.PriorityNormal}}))
		got, err = kd.KindDefaults(ctx, []string{"kd.a", "kd.b"})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, 7, got[0].MaxAttempts)
		require.Equal(t, 3, got[1].MaxAttempts)
		require.Equal(t, store.PriorityNormal, got[1].Priority)

		require.NoError(t, kd.DeclareKindDefaults(ctx, nil))
		got, err = kd.KindDefaults(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})
	t.Run("Invalid", func(t *testing.T) {
		st := newStore(t)
		kd := as[store.KindDefaulter](t, st)
		ctx := t.Context()
		valid := store.KindDefaults{Kind: "kd.valid", MaxAttempts: 2, Priority: store.PriorityNormal}
		for name, bad := range map[string]store.KindDefaults{
			"EmptyKind":       {MaxAttempts: 1, Priority: store.PriorityNormal},
			"NulInKind":       {Kind: "a\x00b", MaxAttempts: 1, Priority: store.PriorityNormal},
			"ZeroAttempts":    {Kind: "kd.x", Priority: store.PriorityNormal},
			"TooManyAttempts": {Kind: "kd.x", MaxAttempts: store.MaxAttemptsLimit + 1, Priority: store.PriorityNormal},
			"ZeroPriority":    {Kind: "kd.x", MaxAttempts: 1},
			"PriorityTooLow":  {Kind: "kd.x", MaxAttempts: 1, Priority: store.PriorityLow + 1},
		} {
			t.Run(name, func(t *testing.T) {
				err := kd.DeclareKindDefaults(ctx, []store.KindDefaults{valid, bad})
				require.ErrorIs(t, err, store.ErrInvalidParams)
			})
		}
		err := kd.DeclareKindDefaults(ctx, []store.KindDefaults{valid, valid})
		require.ErrorIs(t, err, store.ErrInvalidParams, "a kind given twice")
		got, err := kd.KindDefaults(ctx, []string{"kd.valid", "kd.x"})
		require.NoError(t, err)
		require.Empty(t, got, "a refused declaration stores nothing")
	})
}
