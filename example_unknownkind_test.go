package ax_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
)

// ExampleConfig_refuseUnknownKinds refuses a misspelt kind at Schedule,
// instead of storing a job no host will ever run. A kind is known when
// this host handles it or a node of the cluster lists it.
func ExampleConfig_refuseUnknownKinds() {
	ctx := context.Background()
	st := memstore.New()
	// A worker host elsewhere handles email.send (its Scheduler registers
	// this node row when it starts).
	_ = st.HeartbeatNode(ctx, &store.NodeParams{Name: "worker-1", Kinds: []string{"email.send"}, TTL: time.Minute})

	web, _ := ax.New(ax.Config{Store: st, Logger: zap.NewNop(), RefuseUnknownKinds: true})
	for _, kind := range []string{"email.send", "emial.send"} {
		_, err := web.Schedule(ctx, kind, map[string]string{"to": "a@example.com"})
		fmt.Printf("%s: refused %v\n", kind, errors.Is(err, ax.ErrUnknownKind))
	}

	// Output:
	// email.send: refused false
	// emial.send: refused true
}
