package main

import (
	"flag"
	"fmt"

	"github.com/axsched/ax"
)

func periodicList(fs *flag.FlagSet) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		list, err := a.Schedules(e.ctx)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, map[string]any{"schedules": list})
		}
		t := newTable(e.stdout, "NAME", "KIND", "SPEC", "TIME ZONE", "LAST TICK", "NEXT TICK", "STATUS")
		for _, sc := range list {
			status := "active"
			if sc.Paused {
				status = "paused"
			}
			last := "never" // no tick since the schedule was first declared
			if !sc.LastTick.IsZero() {
				last = when(sc.LastTick)
			}
			t.row(sc.Name, orDash(sc.Kind), sc.Spec, orDash(sc.TimeZone), last, when(sc.NextTick), status)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(e.stdout, "(no periodic schedules)")
		}
		return nil
	}
}

func periodicPause(fs *flag.FlagSet) func(*env, []string) error {
	return setSchedule(true)
}

func periodicResume(fs *flag.FlagSet) func(*env, []string) error {
	return setSchedule(false)
}

func setSchedule(paused bool) func(*env, []string) error {
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one schedule name")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		set := a.ResumeSchedule
		if paused {
			set = a.PauseSchedule
		}
		sc, err := set(e.ctx, args[0])
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, sc)
		}
		if paused {
			fmt.Fprintf(e.stdout, "paused schedule %s: its ticks pass without jobs until resumed\n", sc.Name)
		} else {
			fmt.Fprintf(e.stdout, "resumed schedule %s: next tick %s\n", sc.Name, when(sc.NextTick))
		}
		return nil
	}
}

// triggerResult is the JSON of periodic trigger. Duplicate: the
// schedule's previous manual run (JobID) has not ended, and nothing was
// inserted.
type triggerResult struct {
	Schedule  string `json:"schedule"`
	JobID     string `json:"job_id"`
	Duplicate bool   `json:"duplicate"`
}

// periodicTrigger runs a schedule's job once, now (Admin.TriggerSchedule):
// one manual run at a time, unless --force.
func periodicTrigger(fs *flag.FlagSet) func(*env, []string) error {
	force := fs.Bool("force", false, "run even while the schedule's previous manual run has not ended")
	return func(e *env, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want one schedule name")
		}
		a, release, err := e.admin()
		if err != nil {
			return err
		}
		defer release()
		var opts []ax.TriggerOption
		if *force {
			opts = append(opts, ax.ForceTrigger())
		}
		res, err := a.TriggerSchedule(e.ctx, args[0], opts...)
		if err != nil {
			return err
		}
		if e.global.json {
			return printJSON(e.stdout, triggerResult{Schedule: args[0], JobID: res.ID.String(), Duplicate: res.Duplicate})
		}
		if res.Duplicate {
			fmt.Fprintf(e.stdout, "not triggered: schedule %s's previous manual run, job %s, has not ended (--force runs another)\n", args[0], res.ID)
			return nil
		}
		fmt.Fprintf(e.stdout, "triggered schedule %s: job %s\n", args[0], res.ID)
		return nil
	}
}
