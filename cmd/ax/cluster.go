package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/axsched/ax"
)

// nodesResult is the JSON of ax nodes.
type nodesResult struct {
	// Leader is null when the store cannot tell.
	Leader *ax.Leader `json:"leader"`
	Nodes  []ax.Node  `json:"nodes"`
}

func nodesCmd(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		nodes, err := a.Nodes(e.ctx)
		if err != nil {
			return err
		}
		leader, err := a.Leader(e.ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			leader, err = nil, nil // the store cannot tell; the nodes still list
		}
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, nodesResult{Leader: leader, Nodes: nodes})
		}
		t := newTable(e.stdout, "NAME", "STATE", "LEADER", "VERSION", "STARTED", "HEARTBEAT", "KEYS", "KINDS")
		for _, n := range nodes {
			lead := ""
			if n.Leader {
				lead = "yes"
			}
			t.row(n.Name, string(n.State), orDash(lead), orDash(n.Version), when(n.StartedAt), when(n.HeartbeatAt),
				orDash(strings.Join(n.KeyIDs, ",")), orDash(strings.Join(n.Kinds, ",")))
		}
		if err := t.flush(); err != nil {
			return err
		}
		switch {
		case leader == nil:
			fmt.Fprintln(e.stdout, "maintenance leader: unknown (the store cannot tell)")
		case leader.Node == "":
			fmt.Fprintln(e.stdout, "no maintenance leader right now")
		default:
			fmt.Fprintf(e.stdout, "maintenance leader: %s (term %d, until %s)\n", leader.Node, leader.Term, when(leader.ExpiresAt))
		}
		return nil
	}
}

func statsCmd(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		st, err := a.Stats(e.ctx)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, st)
		}
		kinds := make(map[string]bool)
		for k := range st.Queue {
			kinds[k] = true
		}
		for k := range st.OldestDue {
			kinds[k] = true
		}
		t := newTable(e.stdout, "KIND", "SCHEDULED", "RETRYING", "RUNNING", "PAUSED", "SUCCEEDED", "DEAD", "CANCELLED", "OLDEST DUE")
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			q := st.Queue[k]
			due := "-"
			if _, ok := st.OldestDue[k]; ok {
				due = st.DueAge(k).Round(time.Millisecond).String() + " ago"
			}
			t.row(k, count(q[ax.StateScheduled]), count(q[ax.StateRetrying]), count(q[ax.StateRunning]),
				count(q[ax.StatePaused]), count(q[ax.StateSucceeded]), count(q[ax.StateDead]), count(q[ax.StateCancelled]), due)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(kinds) == 0 {
			fmt.Fprintln(e.stdout, "(no jobs)")
		}
		if !st.QueueCounted {
			fmt.Fprintln(e.stdout, "(the store does not count jobs)")
		}
		return nil
	}
}
