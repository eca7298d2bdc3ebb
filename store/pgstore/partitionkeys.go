package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/axsched/ax/store"
)

// partitionKeys holds the partition key of each row of an insert, by the
// row's index, and whether the row is unkeyed: of a kind with a partition
// source but without a key, so in the partition "" (unkeyed.go). Both are
// nil when no row's kind has a partition source, the common case, which
// costs nothing more.
type partitionKeys struct {
	keys    []string
	unkeyed []bool
}

// of returns row i's key ("" for none).
func (k partitionKeys) of(i int) string {
	if k.keys == nil {
		return ""
	}
	return k.keys[i]
}

// isUnkeyed reports whether row i is of a kind with a partition source
// and has no key: the jobs_unkeyed_idx the flow claim reads the
// partition "" through holds it.
func (k partitionKeys) isUnkeyed(i int) bool {
	return k.unkeyed != nil && k.unkeyed[i]
}

// rowColumns are the columns insertMany computes per row before it
// writes: run_at (and so scheduled_at), metadata as JSON, partition key.
type rowColumns struct {
	runAt []time.Time
	meta  [][]byte
	pkeys partitionKeys
}

// partitionKeys derives each row's partition key from its kind's
// PartitionSource as this Store last read it (store.PartitionKeyOf).
//
// It is the one place a job inserted from Go gets its key: insertOne and
// insertMany (the COPY, the multi-row INSERT and the one-row statement)
// call it and write the key with the row, so no path that inserts jobs
// can leave it out. Batch children, periodic ticks and jobs with
// follow-ups once did, and landed in the partition "", where one busy
// tenant's full slots held back every other (issue 40). Jobs inserted
// from templates in SQL (follow-ups, Then jobs, batch completions) get
// theirs from ax_partition_key (migration 0016), which the conformance
// suite holds to PartitionKeyOf.
//
// The kinds' settings are read on q (the caller's transaction, when
// there is one), never on a second connection. A key PartitionKeyOf
// refuses fails the insert with an error wrapping store.ErrInvalidParams,
// before anything is written.
func (s *Store) partitionKeys(ctx context.Context, q querier, params ...store.InsertParams) (partitionKeys, error) {
	snap, err := s.flowKinds(withConn(ctx, q))
	if err != nil {
		return partitionKeys{}, fmt.Errorf("derive partition keys: %w", err)
	}
	var keys partitionKeys
	for i := range params {
		p := &params[i]
		cfg := snap.kinds[p.Kind]
		if cfg == nil || cfg.Partition.IsZero() {
			continue
		}
		key, err := store.PartitionKeyOf(cfg.Partition, p.Metadata, p.Payload)
		if err != nil {
			return partitionKeys{}, fmt.Errorf("job %d: %w", i, err)
		}
		if keys.keys == nil {
			keys = partitionKeys{keys: make([]string, len(params)), unkeyed: make([]bool, len(params))}
		}
		keys.keys[i], keys.unkeyed[i] = key, key == ""
	}
	return keys, nil
}
