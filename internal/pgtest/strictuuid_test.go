package pgtest_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/pgtest"
)

// TestStrictUUIDs: a strict pool refuses uuid.UUID values and targets in
// every shape pgstore could pass them (a value, a pointer, a slice, a
// nullable target), naming the Go type and the call, and takes the
// [16]byte forms of each.
func TestStrictUUIDs(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t) // every pgtest pool is strict
	id := uuid.Must(uuid.NewV7())

	for _, tc := range []struct {
		name, sql string
		arg       any
	}{
		{"value", `SELECT $1::uuid IS NOT NULL`, id},
		{"pointer", `SELECT $1::uuid IS NOT NULL`, &id},
		{"slice", `SELECT $1::uuid[] IS NOT NULL`, []uuid.UUID{id}},
	} {
		t.Run("refuses a "+tc.name, func(t *testing.T) {
			var ok bool
			err := pool.QueryRow(ctx, tc.sql, tc.arg).Scan(&ok)
			require.ErrorContains(t, err, "pgtest.StrictUUIDs: ")
			require.ErrorContains(t, err, "uuid.UUID reached pgx as a uuid at strictuuid_test.go:")
		})
	}
	t.Run("refuses targets", func(t *testing.T) {
		var (
			got  uuid.UUID
			null *uuid.UUID
			all  []uuid.UUID
		)
		require.ErrorContains(t, pool.QueryRow(ctx, `SELECT $1::uuid`, [16]byte(id)).Scan(&got), "pgtest.StrictUUIDs")
		require.ErrorContains(t, pool.QueryRow(ctx, `SELECT $1::uuid`, [16]byte(id)).Scan(&null), "pgtest.StrictUUIDs")
		require.ErrorContains(t, pool.QueryRow(ctx, `SELECT ARRAY[$1::uuid]`, [16]byte(id)).Scan(&all), "pgtest.StrictUUIDs")
	})
	t.Run("takes [16]byte", func(t *testing.T) {
		var (
			got  uuid.UUID
			null *[16]byte
			all  [][16]byte
		)
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid, NULL::uuid, $2::uuid[]`, [16]byte(id), [][16]byte{id}).
			Scan((*[16]byte)(&got), &null, &all))
		require.Equal(t, id, got)
		require.Nil(t, null)
		require.Equal(t, [][16]byte{id}, all)
	})
}
