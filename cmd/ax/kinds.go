package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/axsched/ax"
)

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
		t := newTable(e.stdout, "KIND", "STATUS", "SCHEDULED", "RETRYING", "RUNNING", "PAUSED", "DEAD", "NODES")
		for _, k := range kinds {
			status := "active"
			if k.Paused {
				status = "paused"
			}
			t.row(k.Kind, status, count(k.Jobs[ax.StateScheduled]), count(k.Jobs[ax.StateRetrying]),
				count(k.Jobs[ax.StateRunning]), count(k.Jobs[ax.StatePaused]), count(k.Jobs[ax.StateDead]),
				orDash(strings.Join(k.Nodes, ",")))
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
				return fmt.Errorf("%w: kind %q: no jobs, no running node handles it, never paused (--force pauses it anyway)", errNotFound, args[0])
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
