package faulttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

// TestRollingKeyRotation rolls a new encryption key out to three worker
// processes, one host at a time, while every host schedules and runs
// sealed jobs (-keys; direct starts off, so that a job sealed on one host
// is claimed by any), and checks that no job died or was lost. Each host
// is stopped (SIGTERM, graceful) and started again with the next key ring
// file, as a deploy does.
//
//   - OnePhase makes the new key current on each host at once: until the
//     last host is restarted, hosts without the key claim jobs sealed with
//     it. They leave them for a host that has it (EventKeyMissing): before
//     that fix every such job went dead at its first attempt.
//   - TwoPhase is the documented rotation (docs/guide.md): first the
//     new key is added everywhere as an older key, then made current
//     everywhere. No host ever meets a key it lacks.
//
// After the rollout every job sealed with the old key is re-encrypted
// (Admin.Reencrypt), and the old key can be removed.
func TestRollingKeyRotation(t *testing.T) {
	sideBySide(t)
	cases := []struct {
		name   string
		phases []string // key ring files, rolled out in turn
		missed bool     // hosts meet a key they lack
	}{
		{"OnePhase", []string{"new"}, true},
		{"TwoPhase", []string{"added", "new"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { rollingRotation(t, tc.phases, tc.missed) })
	}
}

func rollingRotation(t *testing.T, phases []string, missed bool) {
	c := newCluster(t)
	oldKey, err := ax.GenerateKey("2026-12")
	require.NoError(t, err)
	newKey, err := ax.GenerateKey("2027-01")
	require.NoError(t, err)
	rings := map[string]string{}
	for name, keys := range map[string][]ax.Key{
		"old":   {oldKey},
		"added": {oldKey, newKey}, // phase 1: the new key opens, the old one still seals
		"new":   {newKey, oldKey}, // phase 2: the new key seals
	} {
		b, err := ax.MarshalKeyRing(keys[0], keys[1:]...)
		require.NoError(t, err)
		rings[name] = filepath.Join(t.TempDir(), name+".json")
		require.NoError(t, os.WriteFile(rings[name], b, 0o600))
	}
	const schedFor = 3 * time.Second
	args := func(ring string) []string {
		return []string{"-keys", rings[ring], "-key-missing-delay", "100ms", "-no-direct-start", "-workers", "20",
			"-schedule-rate", "40", "-schedule-for", schedFor.String(), "-schedule-ms", "20"}
	}
	// start starts host i with ring and waits until it has scheduled for
	// schedFor: its jobs, sealed with the ring's current key, are then
	// spread over the hosts.
	start := func(i int, ring string) *proc {
		p := c.start(fmt.Sprintf("h%d-%s", i, ring), "", args(ring)...)
		p.waitLine(t, "SCHEDULE_DONE", schedFor+30*time.Second)
		return p
	}
	hosts := make([]*proc, 3)
	for i := range hosts {
		hosts[i] = c.start(fmt.Sprintf("h%d-old", i), "", args("old")...)
	}
	for _, h := range hosts {
		h.waitLine(t, "SCHEDULE_DONE", schedFor+30*time.Second)
	}
	for _, ring := range phases {
		for i, h := range hosts {
			h.signal(t, syscall.SIGTERM)
			h.waitLine(t, "STOPPED", 30*time.Second)
			h.wait(t, 10*time.Second)
			hosts[i] = start(i, ring)
		}
	}
	c.waitFor("every job to end", 2*time.Minute, func() bool {
		return c.count(`SELECT count(*) FROM ax.jobs_all WHERE kind = 'work' AND state NOT IN ('succeeded', 'dead', 'cancelled')`) == 0
	})

	scheduled, failed, missing := 0, 0, 0
	for _, p := range c.procs {
		scheduled += len(p.has("SCHEDULED "))
		failed += len(p.has("ERROR "))
		missing += len(p.has("EVENT key_missing "))
	}
	tl := c.tally()
	dead := c.count(`SELECT count(*) FROM ax.jobs_all WHERE state = 'dead'`)
	figure(t, "%d hosts, %d restarts, %d jobs scheduled (%d Schedule errors), %d executions, %d dead, %d lost, %d run twice, %d claims left for a host with the key",
		len(hosts), len(phases)*len(hosts), scheduled, failed, tl.executions, dead, tl.lost, tl.duplicated, missing)
	require.Zero(t, failed)
	require.Equal(t, scheduled, tl.jobs, "every job whose Schedule returned is stored")
	require.Zero(t, dead, "no job died")
	require.Zero(t, tl.lost, "no job lost")
	require.Zero(t, tl.duplicated, "no job ran twice")
	if missed {
		require.NotZero(t, missing, "the scenario did not make a host meet a key it lacks")
	} else {
		require.Zero(t, missing, "a host met a key it lacks in the two-phase rotation")
	}

	// Every host seals with the new key now: re-encrypt what the old one
	// sealed, after which it can be removed.
	ctx := context.Background()
	st, err := pgstore.New(ctx, c.pool, pgstore.WithoutMigrate())
	require.NoError(t, err)
	ring, err := ax.LoadKeyRing(rings["new"])
	require.NoError(t, err)
	admin, err := ax.NewAdmin(ax.AdminConfig{Store: st, Keys: ring, Logger: zap.NewNop()})
	require.NoError(t, err)
	require.ErrorIs(t, admin.CheckKeyRemoval(ctx, oldKey.ID), ax.ErrKeyInUse)
	_, err = admin.Reencrypt(ctx, ax.ReencryptOptions{})
	require.NoError(t, err)
	require.NoError(t, admin.CheckKeyRemoval(ctx, oldKey.ID))
}
