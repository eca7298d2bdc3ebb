package ax_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/memstore"
)

// TestKeyRotationInOneStepIsReported (issue 41): each node lists its
// keys' IDs (current first) in the registry, and the leader warns when a
// running node seals with a key other running nodes lack, which is what
// a rotation done in one step does: there, host b's jobs sealed with k2
// could not be opened on a. Once a's replacement holds k2 as an older key
// nothing is missing, and no leader warns again.
func TestKeyRotationInOneStepIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := memstore.New()
		k1, k2 := mustKey(t, "k1"), mustKey(t, "k2")
		ring := func(cur ax.Key, older ...ax.Key) *ax.KeyRing {
			r, err := ax.NewKeyRing(cur, older...)
			require.NoError(t, err)
			return r
		}
		core, logs := observer.New(zapcore.InfoLevel)
		a := newScheduler(t, st, slowPolls, func(c *ax.Config) {
			c.Node, c.Keys, c.Logger = "a", ring(k1), zap.New(core)
		})
		start(t, a)
		time.Sleep(time.Second) // a leads
		b := newScheduler(t, st, slowPolls, func(c *ax.Config) { c.Node, c.Keys, c.Logger = "b", ring(k2, k1), zap.New(core) })
		start(t, b)

		nodes, err := a.Nodes(ctx)
		require.NoError(t, err)
		keys := map[string][]string{}
		for _, n := range nodes {
			keys[n.Name] = n.KeyIDs
		}
		require.Equal(t, map[string][]string{"a": {"k1"}, "b": {"k2", "k1"}}, keys, "current key first")

		warned := func() []string {
			var out []string
			for _, e := range logs.FilterMessageSnippet("seals with a key other nodes do not hold").All() {
				for _, m := range e.ContextMap()["missing"].([]any) {
					out = append(out, m.(string))
				}
			}
			return out
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Equal(t, []string{"key k2 (current on b) is missing on a"}, warned())

		// Phase one done right: a gets k2 as an older key.
		require.NoError(t, a.Stop(ctx))
		a2 := newScheduler(t, st, slowPolls, func(c *ax.Config) {
			c.Node, c.Keys, c.Logger = "a2", ring(k1, k2), zap.New(core)
		})
		start(t, a2)
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		require.Len(t, warned(), 1, "warned once, and not again once every node holds k2")
	})
}
