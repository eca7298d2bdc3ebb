package pgstore

import "github.com/google/uuid"

// IDs go to pgx as [16]byte and are scanned back into [16]byte, never as
// uuid.UUID: pgx has no plan of its own for uuid.UUID, so it sends one
// through its driver.Valuer (the string, a binary encode of it that fails
// and formats an error, then the string parsed back into bytes) and scans
// one through its sql.Scanner, as text. A uuid.UUID converts to and from
// [16]byte for free; slices need a copy (idBytes, idsOf). Every test
// pool (internal/pgtest's and internal/citustest's) refuses uuid.UUID
// (internal/pgtest.StrictUUIDs), so a statement that takes one fails in
// whichever test reaches it.

// idBytes returns ids as the [16]byte values pgx sends directly.
func idBytes(ids []uuid.UUID) [][16]byte {
	b := make([][16]byte, len(ids))
	for i, id := range ids {
		b[i] = id
	}
	return b
}

// idsOf returns IDs scanned as [16]byte values as uuid.UUIDs.
func idsOf(b [][16]byte) []uuid.UUID {
	ids := make([]uuid.UUID, len(b))
	for i, v := range b {
		ids[i] = v
	}
	return ids
}
