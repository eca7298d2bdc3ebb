package ax_test

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// With Config.Keys, payloads reach the store sealed; the handler and an
// Admin holding the ring see them plain.
func ExampleConfig_keys() {
	ctx := context.Background()
	key, _ := ax.GenerateKey("2026-12") // in production: ax.LoadKeyRing(path)
	ring, _ := ax.NewKeyRing(key)
	st := memstore.New()
	s, _ := ax.New(ax.Config{Store: st, Keys: ring, Logger: zap.NewNop()})
	res, _ := s.Schedule(ctx, "welcome", map[string]string{"email": "ada@example.com"},
		ax.SecretMetadata(map[string]string{"invite": "tok-123"}))
	_ = s.Stop(ctx)

	raw, _ := st.Get(ctx, res.ID)
	fmt.Println("stored sealed:", ax.IsSealed(raw.Payload), "with key", ax.SealedKeyID(raw.Payload))
	fmt.Println("secret metadata sealed:", ax.IsSealed(raw.Metadata["invite"]))

	admin, _ := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	rec, _ := admin.Get(ctx, res.ID)
	fmt.Println("read with the ring:", string(rec.Payload), rec.Metadata["invite"])
	// Output:
	// stored sealed: true with key 2026-12
	// secret metadata sealed: true
	// read with the ring: {"email":"ada@example.com"} tok-123
}
