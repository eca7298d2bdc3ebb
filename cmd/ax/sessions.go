package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store"
)

// revokeResult is the JSON of sessions revoke.
type revokeResult struct {
	Key       string    `json:"key"`
	RevokedAt time.Time `json:"revoked_at"`
}

// sessionsRevoke is ax sessions revoke KEY_ID: every dashboard session of
// the key opened until now ends, on every ax serve (and axhttp handler)
// on the store (axhttp.RevokeSessions). It is what to do when a session
// cookie may have leaked, or before a key is removed.
func sessionsRevoke(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one key ID")
		}
		st, release, err := e.open.Store(e.ctx, connection{url: e.global.url, schema: e.global.schema})
		if err != nil {
			return err
		}
		defer release()
		rk, ok := st.(store.RevocationKeeper)
		if !ok {
			return fmt.Errorf("the store keeps no revocations (store.RevocationKeeper)")
		}
		now := time.Now()
		if err := axhttp.RevokeSessions(e.ctx, rk, args[0], now); err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, revokeResult{Key: args[0], RevokedAt: now.UTC()})
		}
		fmt.Fprintf(e.stdout, "revoked the dashboard sessions of key %s opened until %s\n", args[0], now.UTC().Format(time.RFC3339))
		return nil
	}
}
