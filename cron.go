package ax

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser parses Every's specs: five fields, an optional leading
// seconds field, descriptors (@daily, @every 30s...) and a CRON_TZ= or TZ=
// prefix.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// allHours is the hour field of a spec that matches every hour.
const allHours = 1<<24 - 1

// cronSchedule computes the ticks of one parsed spec. Ticks are instants;
// see Every for how they are chosen around DST transitions.
type cronSchedule struct {
	// every is the interval of an @every spec, ticks aligned to the Unix
	// epoch; zero for other specs.
	every time.Duration
	// spec is the parsed spec in its time zone.
	spec *cron.SpecSchedule
	// wall is spec evaluated on wall-clock times (as if in UTC), for specs
	// at fixed hours; nil for specs matching every hour.
	wall *cron.SpecSchedule
	loc  *time.Location
}

// parseCron parses spec with robfig/cron's parser. loc is the zone of
// specs without a CRON_TZ= or TZ= prefix; locSet reports it came from the
// Location option, which a prefix contradicts.
func parseCron(spec string, loc *time.Location, locSet bool) (*cronSchedule, error) {
	prefixed := strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=")
	if prefixed && locSet {
		return nil, fmt.Errorf("%w: spec %q has a time zone prefix and a Location option", ErrInvalidSchedule, spec)
	}
	if err := checkEvery(spec); err != nil {
		return nil, err
	}
	parsed, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %w", ErrInvalidSchedule, spec, err)
	}
	switch s := parsed.(type) {
	case cron.ConstantDelaySchedule:
		return &cronSchedule{every: s.Delay, loc: time.UTC}, nil
	case *cron.SpecSchedule:
		if !prefixed {
			s.Location = loc // the parser's default is time.Local
		}
		c := &cronSchedule{spec: s, loc: s.Location}
		if s.Hour&allHours != allHours {
			w := *s
			w.Location = time.UTC
			c.wall = &w
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: spec %q: unsupported schedule type %T", ErrInvalidSchedule, spec, parsed)
}

// checkEvery refuses @every intervals robfig/cron would silently round up
// to one second: zero, negative, below a second, or not whole seconds.
func checkEvery(spec string) error {
	rest := spec
	if strings.HasPrefix(rest, "CRON_TZ=") || strings.HasPrefix(rest, "TZ=") {
		if _, after, ok := strings.Cut(rest, " "); ok {
			rest = strings.TrimSpace(after)
		}
	}
	arg, ok := strings.CutPrefix(rest, "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	switch {
	case err != nil:
		return fmt.Errorf("%w: spec %q: %w", ErrInvalidSchedule, spec, err)
	case d < time.Second || d%time.Second != 0:
		return fmt.Errorf("%w: spec %q: @every takes whole seconds, at least 1s", ErrInvalidSchedule, spec)
	}
	return nil
}

// next returns the first tick strictly after t, or the zero time when the
// spec matches nothing in the following five years (robfig/cron's search
// limit; "0 0 30 2 *" never matches).
func (c *cronSchedule) next(t time.Time) time.Time {
	switch {
	case c.every > 0:
		d := int64(c.every)
		n := t.UnixNano()
		k := n / d
		if n < 0 && n%d != 0 {
			k--
		}
		return time.Unix(0, (k+1)*d).UTC()
	case c.wall == nil:
		return c.spec.Next(t)
	}
	// Fixed hours: find the next matching wall-clock time, then the
	// earliest instant showing it (or, in a spring-forward gap, the end of
	// the gap). A wall time repeated by a fall-back maps to its first
	// instant, which is not after t the second time round.
	w := wallClock(t, c.loc)
	for {
		w = c.wall.Next(w)
		if w.IsZero() {
			return w
		}
		if at := fromWall(w, c.loc); at.After(t) {
			return at
		}
	}
}

// latest returns the last n ticks in (after, upTo], oldest first (fewer if
// there are fewer). It scans windows ending at upTo that grow until they
// hold n ticks or reach after, so a long downtime costs about as much as
// the ticks it returns, not as all the ticks it missed.
func (c *cronSchedule) latest(after, upTo time.Time, n int) []time.Time {
	const maxWindow = 100 * 365 * 24 * time.Hour
	for window := time.Minute; ; window *= 8 {
		from := upTo.Add(-window)
		if window > maxWindow || !from.After(after) {
			from = after
		}
		var ticks []time.Time
		for t := c.next(from); !t.IsZero() && !t.After(upTo); t = c.next(t) {
			ticks = append(ticks, t)
		}
		if len(ticks) >= n || from.Equal(after) {
			return ticks[max(0, len(ticks)-n):]
		}
	}
}

// wallClock returns t's wall clock in loc as a UTC time.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// fromWall returns the earliest instant whose wall clock in loc is w (a
// wall-clock time written in UTC) or, when loc skips w (a spring-forward
// gap), the first instant after the gap.
func fromWall(w time.Time, loc *time.Location) time.Time {
	// The offsets loc uses within a day of w: w is at most 14 hours from
	// UTC, so its instants are among w minus each of them.
	var offsets []int
	for a := w.Add(-15 * time.Hour).In(loc); ; {
		_, off := a.Zone()
		offsets = append(offsets, off)
		_, end := a.ZoneBounds()
		if end.IsZero() || end.After(w.Add(15*time.Hour)) {
			break
		}
		a = end.In(loc)
	}
	var best time.Time
	for _, off := range offsets {
		at := w.Add(-time.Duration(off) * time.Second).In(loc)
		if wallClock(at, loc).Equal(w) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: read with the offset before the transition, w lands past it,
	// in the zone period that starts where the gap ends.
	for _, off := range offsets {
		at := w.Add(-time.Duration(off) * time.Second).In(loc)
		start, _ := at.ZoneBounds()
		if !start.IsZero() && !wallClock(start, loc).Before(w) && (best.IsZero() || start.Before(best)) {
			best = start.In(loc)
		}
	}
	if best.IsZero() {
		best = time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	}
	return best
}
