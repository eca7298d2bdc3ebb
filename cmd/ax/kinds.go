package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axhttp"
)

// breaker and limits describe a kind's flow control as the dashboard's
// Kinds page does (one text for both).
var (
	breaker = axhttp.BreakerSummary
	limits  = axhttp.LimitsSummary
)

// kindsList prints the kinds. STATUS is the kind's: active or paused
// (Admin.PauseKind); unhandled (or paused,unhandled) when its jobs have
// been due for the grace with no running node handling it
// (KindState.Unhandled). The job
// counts by state follow; the paused jobs' column is PAUSED JOBS, so that
// it is not read as the kind's pause.
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
		t := newTable(e.stdout, "KIND", "STATUS", "SCHEDULED", "RETRYING", "RUNNING", "PAUSED JOBS", "DEAD", "BREAKER", "LIMITS", "NODES")
		unhandled := 0
		for _, k := range kinds {
			status := "active"
			switch {
			case k.Paused && k.Unhandled:
				status = "paused,unhandled"
			case k.Paused:
				status = "paused"
			case k.Unhandled:
				status = "unhandled"
			}
			if k.Unhandled {
				unhandled++
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
		if unhandled > 0 {
			fmt.Fprintf(e.stdout, "\n%d kind(s) unhandled: jobs due for more than %s and no running node handles the kind; they wait until a host that handles it runs (a misspelt kind, or hosts deployed without its handler?)\n",
				unhandled, ax.DefaultUnhandledKindGrace)
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
		fmt.Fprintf(e.stdout, "paused kind %s: hosts stop starting its jobs at once (within one heartbeat on a host that misses the store's notification); running jobs finish\n", ks.Kind)
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

// kindsPartitions lists the breakers the store keeps for a kind's
// partitions (PartitionBreaker): the open and half-open ones, and closed
// ones counting failures in a row; a partition not listed is closed.
func kindsPartitions(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one kind")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		list, err := a.PartitionBreakers(e.ctx, args[0])
		if err != nil {
			return err
		}
		if e.global.json {
			if list == nil {
				list = []ax.PartitionBreakerState{}
			}
			return printJSON(e.stdout, map[string]any{"partitions": list})
		}
		t := newTable(e.stdout, "PARTITION", "BREAKER", "RUNNING", "CHANGED")
		for i := range list {
			p := &list[i]
			changed := "-"
			if !p.Breaker.ChangedAt.IsZero() {
				changed = p.Breaker.ChangedAt.UTC().Format(time.RFC3339)
			}
			t.row(strconv.Quote(p.PartitionKey), axhttp.PartitionBreakerSummary(p), count(p.Running), changed)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintf(e.stdout, "(every partition of %s is closed)\n", args[0])
		}
		return nil
	}
}

// kindsPartitionBreaker opens or closes the breaker of one partition of
// a kind: KIND KEY ("" names the partition of the jobs without a key).
func kindsPartitionBreaker(open bool) func(fs *flag.FlagSet) func(*env, []string) error {
	return func(fs *flag.FlagSet) func(*env, []string) error {
		return func(e *env, args []string) error {
			if len(args) != 2 {
				return usageErrorf("want a kind and a partition key")
			}
			a, release, err := e.admin()
			if err != nil {
				return err
			}
			defer release()
			set := a.ClosePartitionBreaker
			if open {
				set = a.OpenPartitionBreaker
			}
			p, err := set(e.ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if e.global.json {
				return printJSON(e.stdout, p)
			}
			if open {
				fmt.Fprintf(e.stdout, "opened the breaker of kind %s partition %q: none of its jobs starts until %s, then one probe runs; other partitions go on\n",
					p.Kind, p.PartitionKey, p.Breaker.ProbeAt.UTC().Format(time.RFC3339))
				return nil
			}
			fmt.Fprintf(e.stdout, "closed the breaker of kind %s partition %q: its jobs start again\n", p.Kind, p.PartitionKey)
			return nil
		}
	}
}
