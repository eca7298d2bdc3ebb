package store

import "context"

// TxReader is implemented by a Store whose reads can run on a caller's
// transaction of type Tx (a pgx.Tx for pgstore). While a caller's
// transaction is open (ScheduleTx, ScheduleManyTx, ScheduleBatchTx,
// CompleteTx, Then before CompleteTx, and their generic forms), the ax
// package makes every store call it needs (KindDefaults, ListNodes, and
// the store's transaction methods themselves) with the context InTx
// returns, so that the caller's transaction costs exactly one connection,
// the one it holds. A read on a second connection of the same pool would
// wait for a free one; with request transactions holding every connection
// of the pool (a pool of one is the plain case), it waits for ever.
//
// A Store that wraps another and forwards its transaction methods must
// forward InTx too, or the reads go back to the pool. A store whose reads
// never wait for the connection a caller's transaction holds need not
// implement it: sqlitestore reads on its own
// reader connections, and the caller's transaction holds its one writer.
type TxReader[Tx any] interface {
	// InTx returns ctx carrying tx: the Store's calls made with it read
	// and write on tx, never on another connection. tx must stay open
	// while they run, and the caller must not use it concurrently
	// meanwhile (pgx.Tx is not safe for concurrent use).
	InTx(ctx context.Context, tx Tx) context.Context
}
