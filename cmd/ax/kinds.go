package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// breaker describes a kind's circuit breaker: its state, "-" without one.
func breaker(f *ax.FlowState) string {
	if f == nil || f.Config.Breaker.IsZero() {
		return "-"
	}
	switch f.Breaker.State {
	case ax.BreakerOpen:
		return "open until " + f.Breaker.ProbeAt.UTC().Format(time.RFC3339)
	case ax.BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// limits describes a kind's flow limits, "" without any:
// "5 running, 100/1s, tenant: 2 running, 10/1m0s, 1000 pending".
func limits(f *ax.FlowState) string {
	if f == nil {
		return ""
	}
	c := &f.Config
	var out []string
	rate := func(r store.RateLimit) string { return fmt.Sprintf("%d/%s", r.Limit, r.Period) }
	if c.Concurrency > 0 {
		out = append(out, fmt.Sprintf("%d running", c.Concurrency))
	}
	if !c.Rate.IsZero() {
		out = append(out, rate(c.Rate))
	}
	if !c.Partition.IsZero() {
		key := c.Partition.Metadata
		if key == "" {
			key = "payload." + c.Partition.PayloadField
		}
		var part []string
		if c.PartitionConcurrency > 0 {
			part = append(part, fmt.Sprintf("%d running", c.PartitionConcurrency))
		}
		if !c.PartitionRate.IsZero() {
			part = append(part, rate(c.PartitionRate))
		}
		out = append(out, fmt.Sprintf("per %s: %s", key, strings.Join(part, " ")))
	}
	if c.MaxPending > 0 {
		out = append(out, fmt.Sprintf("%d pending", c.MaxPending))
	}
	return strings.Join(out, ", ")
}

func kindsList(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		kinds, err := a.Kinds(e.ctx)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, map[string]any{"kinds": kinds})
		}
		t := newTable(e.stdout, "KIND", "STATUS", "SCHEDULED", "RETRYING", "RUNNING", "PAUSED", "DEAD", "BREAKER", "LIMITS", "NODES")
		for _, k := range kinds {
			status := "active"
			if k.Paused {
				status = "paused"
			}
			t.row(k.Kind, status, count(k.Jobs[ax.StateScheduled]), count(k.Jobs[ax.StateRetrying]),
				count(k.Jobs[ax.StateRunning]), count(k.Jobs[ax.StatePaused]), count(k.Jobs[ax.StateDead]),
				breaker(k.Flow), orDash(limits(k.Flow)), orDash(strings.Join(k.Nodes, ",")))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(kinds) == 0 {
			fmt.Fprintln(e.stdout, "(no kinds)")
		}
		return nil
	}
}

func kindsPause(fs *flag.FlagSet) func(*env, []string) error {
	force := fs.Bool("force", false, "pause a kind the cluster does not know yet (no jobs, no node handles it)")
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one kind")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		if !*force {
			// A typo would pause nothing anyone runs, and look like
			// success: refuse kinds nobody has heard of.
			kinds, err := a.Kinds(e.ctx)
			if err != nil {
				return err
			}
			known := false
			for _, k := range kinds {
				known = known || k.Kind == args[0]
			}
			if !known {
				return fmt.Errorf("%w: kind %q: no jobs, no running node handles it, not paused (--force pauses it anyway)", errNotFound, args[0])
			}
		}
		ks, err := a.PauseKind(e.ctx, args[0])
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, ks)
		}
		fmt.Fprintf(e.stdout, "paused kind %s: hosts stop starting its jobs within one heartbeat; running jobs finish\n", ks.Kind)
		return nil
	}
}

func kindsResume(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one kind")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		ks, err := a.ResumeKind(e.ctx, args[0])
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, ks)
		}
		if ks.UpdatedAt.IsZero() {
			fmt.Fprintf(e.stdout, "kind %s was not paused\n", ks.Kind)
			return nil
		}
		fmt.Fprintf(e.stdout, "resumed kind %s\n", ks.Kind)
		return nil
	}
}

func kindsBreaker(open bool) func(fs *flag.FlagSet) func(*env, []string) error {
	return func(fs *flag.FlagSet) func(*env, []string) error {
		return func(e *env, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want one kind")
			}
			a, release, err := e.admin()
			if err != nil {
				return err
			}
			defer release()
			set := a.CloseBreaker
			if open {
				set = a.OpenBreaker
			}
			f, err := set(e.ctx, args[0])
			if err != nil {
				return err
			}
			if e.global.json {
				return printJSON(e.stdout, f)
			}
			if open {
				fmt.Fprintf(e.stdout, "opened the breaker of kind %s: no job of it starts until %s, then one probe runs\n",
					f.Config.Kind, f.Breaker.ProbeAt.UTC().Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(e.stdout, "closed the breaker of kind %s: its jobs start again\n", f.Config.Kind)
			return nil
		}
	}
}
