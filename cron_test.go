package ax

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCronTicks checks the ticks computed for specs, time zones and DST
// transitions (America/New_York: 2026-03-08 02:00 EST → 03:00 EDT, and
// 2026-11-01 02:00 EDT → 01:00 EST; Australia/Lord_Howe moves by 30
// minutes on 2026-10-04 02:00 → 02:30).
func TestCronTicks(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	lh := mustZone(t, "Australia/Lord_Howe")
	tests := []struct {
		name string
		spec string
		loc  *time.Location
		from time.Time
		want []string // RFC 3339, in the zone's offset
	}{
		{"daily UTC", "0 6 * * *", time.UTC, time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC),
			[]string{"2026-01-02T06:00:00Z", "2026-01-03T06:00:00Z"}},
		{"seconds field", "*/20 * * * * *", time.UTC, time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC),
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"every epoch aligned", "@every 90s", time.UTC, time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC),
			[]string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"}},
		{"every ignores zone", "@every 1h", ny, time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC),
			[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"prefix zone", "CRON_TZ=Asia/Tokyo 0 9 * * *", time.UTC, time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC),
			[]string{"2026-01-02T09:00:00+09:00"}},
		{"spring gap fires at gap end", "30 2 * * *", ny, time.Date(2026, 3, 7, 12, 0, 0, 0, ny),
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"spring gap two times collapse", "0,30 2 * * *", ny, time.Date(2026, 3, 7, 12, 0, 0, 0, ny),
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"spring hourly has no 02:30", "30 * * * *", ny, time.Date(2026, 3, 8, 0, 0, 0, 0, ny),
			[]string{"2026-03-08T00:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"}},
		{"fall repeat fires once", "30 1 * * *", ny, time.Date(2026, 10, 31, 12, 0, 0, 0, ny),
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"fall repeat from inside second pass", "30 1 * * *", ny, time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC), // 01:10 EST
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"fall hourly fires both", "30 * * * *", ny, time.Date(2026, 11, 1, 0, 0, 0, 0, ny),
			[]string{"2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"}},
		{"daily across DST keeps local time", "0 9 * * *", ny, time.Date(2026, 3, 7, 12, 0, 0, 0, ny),
			[]string{"2026-03-08T09:00:00-04:00", "2026-03-09T09:00:00-04:00"}},
		{"half-hour gap", "15 2 * * *", lh, time.Date(2026, 10, 3, 12, 0, 0, 0, lh),
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseCron(tt.spec, tt.loc, tt.loc != time.UTC)
			require.NoError(t, err)
			var got []string
			for at := tt.from; len(got) < len(tt.want); {
				at = c.next(at)
				got = append(got, at.Format(time.RFC3339))
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestCronLatest checks the window scan that finds the latest ticks of a
// long downtime.
func TestCronLatest(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	month := base.Add(30 * 24 * time.Hour)
	tests := []struct {
		name        string
		spec        string
		after, upTo time.Time
		n           int
		want        tickSummary
	}{
		{"none due", "0 6 * * *", base, base.Add(time.Hour), 1, tickSummary{}},
		{"one of many", "* * * * * *", base, month, 1, summary(1, month, month)},
		{"bounded", "* * * * * *", base, month, 1000, summary(1000, month.Add(-999*time.Second), month)},
		{"fewer than n", "0 0 * * 0", base, base.Add(15 * 24 * time.Hour), 5,
			summary(2, time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 11, 0, 0, 0, 0, time.UTC))},
		{"after excluded, upTo included", "0 * * * *", base, base.Add(2 * time.Hour), 10,
			summary(2, base.Add(time.Hour), base.Add(2*time.Hour))},
		{"yearly over years", "0 0 1 1 *", base, base.AddDate(3, 0, 1), 1,
			summary(1, base.AddDate(3, 0, 0), base.AddDate(3, 0, 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseCron(tt.spec, time.UTC, false)
			require.NoError(t, err)
			require.Equal(t, tt.want, summarize(c.latest(tt.after, tt.upTo, tt.n)))
		})
	}
}

// tickSummary is the count and the first and last of a list of ticks.
type tickSummary struct {
	n           int
	first, last string
}

func summary(n int, first, last time.Time) tickSummary {
	return tickSummary{n, first.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339)}
}

func summarize(ticks []time.Time) tickSummary {
	if len(ticks) == 0 {
		return tickSummary{}
	}
	return summary(len(ticks), ticks[0], ticks[len(ticks)-1])
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}
