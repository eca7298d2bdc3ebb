package ax

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/store"
	"github.com/google/uuid"
)

// FaultStore wraps a store (a memstore in the tests) and lets a test
// change what each call does: fail it, hang it until its context ends,
// delay it, or run a hook before or after the real call. It implements
// the optional interfaces the runtime looks for (Notifier, Pruner, Leaser,
// NodeRegistry, PeriodicStore) by forwarding to the wrapped store, which
// must have them (a memstore does).
//
// It lives in an internal test file so that the package's external tests
// (package ax_test) can use it too.
type FaultStore struct {
	store.Store

	// Down makes every call fail with ErrStoreDown at once.
	Down atomic.Bool
	// Hang makes every call block until its context ends (a store that
	// does not answer), then return the context's error.
	Hang atomic.Bool

	mu sync.Mutex
	// BeforeFinish, when set, runs before the real Finish; a non-nil
	// error is returned instead of calling it.
	BeforeFinish func(ctx context.Context, params []store.FinishParams) error
	// AfterFinish, when set, runs after a successful real Finish, before
	// its result is returned.
	AfterFinish func(ctx context.Context, params []store.FinishParams, ok []bool)
	// AfterClaim, when set, runs after a successful real Claim.
	AfterClaim func(res *store.ClaimResult)
	// OnExtend, when set, sees every ExtendLeases call's params, and its
	// error, if not nil, is returned instead of calling it.
	OnExtend func(params *store.ExtendParams) error
	// BeforeCall, when set, runs before every call with its name
	// ("Claim", "Finish", "ExtendLeases", "RescueExpired", ...); a non-nil
	// error is returned instead of calling it.
	BeforeCall func(ctx context.Context, method string) error
	// OnArchive, when set, answers Archive calls instead of the wrapped
	// store (which has no history when it is a memstore).
	OnArchive func(limit int) (int, error)

	calls sync.Map // method name → *atomic.Int64
}

// ErrStoreDown is what a FaultStore returns while Down is set.
var ErrStoreDown = errors.New("faultstore: store down")

// NewFaultStore wraps st.
func NewFaultStore(st store.Store) *FaultStore { return &FaultStore{Store: st} }

// Calls returns how many times method was called.
func (f *FaultStore) Calls(method string) int64 {
	if c, ok := f.calls.Load(method); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// SetBeforeFinish, SetAfterFinish, SetAfterClaim and SetBeforeCall set the
// hooks while the store is in use.
func (f *FaultStore) SetBeforeFinish(fn func(context.Context, []store.FinishParams) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.BeforeFinish = fn
}

// SetAfterFinish sets AfterFinish.
func (f *FaultStore) SetAfterFinish(fn func(context.Context, []store.FinishParams, []bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.AfterFinish = fn
}

// SetAfterClaim sets AfterClaim.
func (f *FaultStore) SetAfterClaim(fn func(*store.ClaimResult)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.AfterClaim = fn
}

// SetOnExtend sets OnExtend.
func (f *FaultStore) SetOnExtend(fn func(*store.ExtendParams) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.OnExtend = fn
}

// SetBeforeCall sets BeforeCall.
func (f *FaultStore) SetBeforeCall(fn func(context.Context, string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.BeforeCall = fn
}

// enter counts a call and applies Down, Hang and BeforeCall.
func (f *FaultStore) enter(ctx context.Context, method string) error {
	c, _ := f.calls.LoadOrStore(method, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if f.Down.Load() {
		return ErrStoreDown
	}
	if f.Hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	hook := f.BeforeCall
	f.mu.Unlock()
	if hook != nil {
		return hook(ctx, method)
	}
	return nil
}

// Insert implements store.Store.
func (f *FaultStore) Insert(ctx context.Context, params []store.InsertParams) ([]store.InsertResult, error) {
	if err := f.enter(ctx, "Insert"); err != nil {
		return nil, err
	}
	return f.Store.Insert(ctx, params)
}

// InsertClaimed implements store.InsertClaimer (call name
// "InsertClaimed"): the wrapped store's, or, when it has none, Insert
// with nothing claimed, as the contract allows.
func (f *FaultStore) InsertClaimed(ctx context.Context, params *store.InsertParams, claim *store.InsertClaim) (store.InsertResult, *store.JobRecord, error) {
	if err := f.enter(ctx, "InsertClaimed"); err != nil {
		return store.InsertResult{}, nil, err
	}
	if ic, ok := f.Store.(store.InsertClaimer); ok {
		return ic.InsertClaimed(ctx, params, claim)
	}
	res, err := f.Store.Insert(ctx, []store.InsertParams{*params})
	if err != nil {
		return store.InsertResult{}, nil, err
	}
	return res[0], nil, nil
}

// Claim implements store.Store.
func (f *FaultStore) Claim(ctx context.Context, params *store.ClaimParams) (*store.ClaimResult, error) {
	if err := f.enter(ctx, "Claim"); err != nil {
		return nil, err
	}
	res, err := f.Store.Claim(ctx, params)
	f.mu.Lock()
	hook := f.AfterClaim
	f.mu.Unlock()
	if err == nil && hook != nil {
		hook(res)
	}
	return res, err
}

// ExtendLeases implements store.Store.
func (f *FaultStore) ExtendLeases(ctx context.Context, params *store.ExtendParams) (*store.ExtendResult, error) {
	if err := f.enter(ctx, "ExtendLeases"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	hook := f.OnExtend
	f.mu.Unlock()
	if hook != nil {
		if err := hook(params); err != nil {
			return nil, err
		}
	}
	return f.Store.ExtendLeases(ctx, params)
}

// Finish implements store.Store.
func (f *FaultStore) Finish(ctx context.Context, params []store.FinishParams) ([]bool, error) {
	if err := f.enter(ctx, "Finish"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	before, after := f.BeforeFinish, f.AfterFinish
	f.mu.Unlock()
	if before != nil {
		if err := before(ctx, params); err != nil {
			return nil, err
		}
	}
	ok, err := f.Store.Finish(ctx, params)
	if err == nil && after != nil {
		after(ctx, params, ok)
	}
	return ok, err
}

// Get implements store.Store.
func (f *FaultStore) Get(ctx context.Context, id uuid.UUID) (*store.JobRecord, error) {
	if err := f.enter(ctx, "Get"); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, id)
}

// Control implements store.Store.
func (f *FaultStore) Control(ctx context.Context, id uuid.UUID, op store.ControlOp) (*store.JobRecord, error) {
	if err := f.enter(ctx, "Control"); err != nil {
		return nil, err
	}
	return f.Store.Control(ctx, id, op)
}

// RescueExpired implements store.Store.
func (f *FaultStore) RescueExpired(ctx context.Context, limit int) ([]store.Rescued, error) {
	if err := f.enter(ctx, "RescueExpired"); err != nil {
		return nil, err
	}
	return f.Store.RescueExpired(ctx, limit)
}

// Now implements store.Store.
func (f *FaultStore) Now(ctx context.Context) (time.Time, error) {
	if err := f.enter(ctx, "Now"); err != nil {
		return time.Time{}, err
	}
	return f.Store.Now(ctx)
}

// Subscribe implements store.Notifier when the wrapped store does.
func (f *FaultStore) Subscribe(fn func(store.Notification)) func() {
	if n, ok := f.Store.(store.Notifier); ok {
		return n.Subscribe(fn)
	}
	return func() {}
}

// AcquireLeader implements store.Leaser (the wrapped store must).
func (f *FaultStore) AcquireLeader(ctx context.Context, p *store.LeaderParams) (*store.Leadership, error) {
	if err := f.enter(ctx, "AcquireLeader"); err != nil {
		return nil, err
	}
	return f.Store.(store.Leaser).AcquireLeader(ctx, p)
}

// ReleaseLeader implements store.Leaser.
func (f *FaultStore) ReleaseLeader(ctx context.Context, name, holder string) (bool, error) {
	if err := f.enter(ctx, "ReleaseLeader"); err != nil {
		return false, err
	}
	return f.Store.(store.Leaser).ReleaseLeader(ctx, name, holder)
}

// Prune implements store.Pruner.
func (f *FaultStore) Prune(ctx context.Context, p *store.PruneParams) (int, error) {
	if err := f.enter(ctx, "Prune"); err != nil {
		return 0, err
	}
	return f.Store.(store.Pruner).Prune(ctx, p)
}

// Archive implements store.Archiver: OnArchive when set, else the wrapped
// store's Archive when it has one, else nothing to move.
func (f *FaultStore) Archive(ctx context.Context, limit int) (int, error) {
	if err := f.enter(ctx, "Archive"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	hook := f.OnArchive
	f.mu.Unlock()
	if hook != nil {
		return hook(limit)
	}
	if a, ok := f.Store.(store.Archiver); ok {
		return a.Archive(ctx, limit)
	}
	return 0, nil
}

// HeartbeatNode implements store.NodeRegistry.
func (f *FaultStore) HeartbeatNode(ctx context.Context, p *store.NodeParams) error {
	if err := f.enter(ctx, "HeartbeatNode"); err != nil {
		return err
	}
	return f.Store.(store.NodeRegistry).HeartbeatNode(ctx, p)
}

// StopNode implements store.NodeRegistry.
func (f *FaultStore) StopNode(ctx context.Context, name string) (bool, error) {
	if err := f.enter(ctx, "StopNode"); err != nil {
		return false, err
	}
	return f.Store.(store.NodeRegistry).StopNode(ctx, name)
}

// ListNodes implements store.NodeRegistry.
func (f *FaultStore) ListNodes(ctx context.Context) ([]*store.NodeRecord, error) {
	if err := f.enter(ctx, "ListNodes"); err != nil {
		return nil, err
	}
	return f.Store.(store.NodeRegistry).ListNodes(ctx)
}

// ReapNodes implements store.NodeRegistry.
func (f *FaultStore) ReapNodes(ctx context.Context, p *store.ReapParams) ([]string, []string, error) {
	if err := f.enter(ctx, "ReapNodes"); err != nil {
		return nil, nil, err
	}
	return f.Store.(store.NodeRegistry).ReapNodes(ctx, p)
}

// DeclarePeriodic implements store.PeriodicStore.
func (f *FaultStore) DeclarePeriodic(ctx context.Context, p *store.DeclarePeriodicParams) (*store.PeriodicDeclaration, error) {
	if err := f.enter(ctx, "DeclarePeriodic"); err != nil {
		return nil, err
	}
	return f.Store.(store.PeriodicStore).DeclarePeriodic(ctx, p)
}

// FirePeriodic implements store.PeriodicStore.
func (f *FaultStore) FirePeriodic(ctx context.Context, p *store.FirePeriodicParams) (*store.FirePeriodicResult, error) {
	if err := f.enter(ctx, "FirePeriodic"); err != nil {
		return nil, err
	}
	return f.Store.(store.PeriodicStore).FirePeriodic(ctx, p)
}

// PeriodicState implements store.PeriodicStore.
func (f *FaultStore) PeriodicState(ctx context.Context, name string) (*store.PeriodicState, error) {
	if err := f.enter(ctx, "PeriodicState"); err != nil {
		return nil, err
	}
	return f.Store.(store.PeriodicStore).PeriodicState(ctx, name)
}

// Compile-time checks: the runtime finds these by type assertion.
var (
	_ store.Notifier      = (*FaultStore)(nil)
	_ store.Leaser        = (*FaultStore)(nil)
	_ store.Pruner        = (*FaultStore)(nil)
	_ store.NodeRegistry  = (*FaultStore)(nil)
	_ store.PeriodicStore = (*FaultStore)(nil)
)
