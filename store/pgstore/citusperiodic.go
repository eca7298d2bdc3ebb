package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/axsched/ax/store"
)

// Periodic schedules on Citus: their states live in a plain table of the
// coordinator, as on PostgreSQL; a fire locks its schedule's row there and
// inserts the ticks' jobs on their shards, in one transaction committed
// through Citus's two-phase commit, so that a stored tick always has its
// job.
var (
	_ store.PeriodicStore      = (*CitusStore)(nil)
	_ store.PeriodicController = (*CitusStore)(nil)
)

// DeclarePeriodic records a host's declaration of a schedule; see
// store.PeriodicStore.
func (c *CitusStore) DeclarePeriodic(ctx context.Context, params *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	return c.s.DeclarePeriodic(ctx, params)
}

// FirePeriodic applies the ticks after the schedule's last and inserts
// their jobs, all or nothing; see store.PeriodicStore and
// Store.FirePeriodic.
func (c *CitusStore) FirePeriodic(ctx context.Context, params *store.FirePeriodicParams) (*store.FirePeriodicResult, error) {
	return c.s.fireIn(ctx, params, c.twoPhase, c.insertTicks)
}

// insertTicks inserts the jobs of a fire's ticks in tx, as Insert would.
func (c *CitusStore) insertTicks(ctx context.Context, tx pgx.Tx, jobs []store.InsertParams) ([]store.InsertResult, error) {
	if err := c.checkInserts(jobs); err != nil {
		return nil, err
	}
	c.lowerCursors(jobs)
	return c.insertRows(ctx, tx, jobs)
}

// PeriodicState returns the stored state of a schedule; see
// store.PeriodicStore.
func (c *CitusStore) PeriodicState(ctx context.Context, name string) (*store.PeriodicState, error) {
	return c.s.PeriodicState(ctx, name)
}

// ListPeriodic returns every schedule's state; see
// store.PeriodicController.
func (c *CitusStore) ListPeriodic(ctx context.Context) ([]store.PeriodicState, error) {
	return c.s.ListPeriodic(ctx)
}

// SetPeriodicPaused pauses or resumes a schedule; see
// store.PeriodicController.
func (c *CitusStore) SetPeriodicPaused(ctx context.Context, name string, paused bool) (*store.PeriodicState, error) {
	return c.s.SetPeriodicPaused(ctx, name, paused)
}
