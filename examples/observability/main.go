// Command observability runs AX on the in-memory store with everything an
// operator looks at: Prometheus metrics served on /metrics (axprom),
// per-kind stats (axstats.Observer) and alert hooks (axalert.Alerter). A steady
// stream of "email.send" jobs succeeds; "invoice.render" jobs fail because
// their downstream is down, which trips the alert rules once each, however
// many invoices fail. After -duration it stops the scheduler (draining the
// running jobs), scrapes its own /metrics, prints the job counters and a
// stats summary, and exits.
//
//	go run ./examples/observability                    # 10 s, metrics on a free port
//	go run ./examples/observability -addr :9464 -duration 1m -log
//	curl -s localhost:9464/metrics | grep '^ax_'
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axalert"
	"github.com/axsched/ax/axprom"
	"github.com/axsched/ax/axstats"
	"github.com/axsched/ax/store/memstore"
)

// options are the command's flags.
type options struct {
	addr     string
	duration time.Duration
	log      bool
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:0", "listen address of the /metrics server (port 0: any free port)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run jobs before exiting")
	flag.BoolVar(&o.log, "log", false, "write the scheduler's logs (info and above) to stderr")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, o options) error {
	logger := zap.NewNop()
	if o.log {
		var err error
		if logger, err = zap.NewProduction(); err != nil {
			return err
		}
		defer logger.Sync() //nolint:errcheck // stderr sync errors are not actionable
	}

	metrics := axprom.New(axprom.Options{})
	stats := axstats.New(axstats.Config{})
	alerts := axalert.New(axalert.Config{}, func(a axalert.Alert) {
		state := "ALERT"
		if a.Resolved {
			state = "RESOLVED"
		}
		fmt.Fprintf(out, "%s %s %s: %s\n", state, a.Rule, a.Kind, a.Message)
	})
	s, err := ax.New(ax.Config{
		Store:     memstore.New(),
		Logger:    logger,
		Observers: []ax.Observer{metrics, stats, alerts},
	})
	if err != nil {
		return err
	}
	metrics.Attach(s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	err = s.Handle("email.send", ax.HandlerFunc(func(ctx context.Context, _ *ax.Job) error {
		select { // a few milliseconds of "sending"
		case <-time.After(time.Duration(1+rand.IntN(20)) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	if err != nil {
		return err
	}
	err = s.Handle("invoice.render", ax.HandlerFunc(func(context.Context, *ax.Job) error {
		return errors.New("pdf service: connection refused")
	}), ax.MaxAttempts(2), ax.Retry(ax.RetryPolicyFunc(func(int, error) time.Duration { return 50 * time.Millisecond })))
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "serving metrics on %s for %s\n", url, o.duration)

	if err := s.Start(ctx); err != nil {
		return errors.Join(err, shutdown(srv, served))
	}
	produceErr := produce(ctx, s, o.duration)
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stopErr := s.Stop(stopCtx) // drains running jobs: the figures below are final
	scrape, scrapeErr := scrapeAX(url)
	if err := errors.Join(produceErr, stopErr, scrapeErr, shutdown(srv, served)); err != nil {
		return err
	}

	fmt.Fprintln(out, "\nfinal scrape (job counters):")
	for _, line := range scrape {
		fmt.Fprintln(out, " ", line)
	}
	fmt.Fprintln(out, "\nstats:")
	kinds := stats.Snapshot()
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		k := kinds[kind]
		fmt.Fprintf(out, "  %-15s started %d, succeeded %d, failed %d, dead %d; start lag p50 %s p99 %s; run time p50 %s p99 %s\n",
			kind, k.Started, k.Succeeded, k.Failed, k.Dead,
			k.StartLag.P50.Round(time.Microsecond), k.StartLag.P99.Round(time.Microsecond),
			k.RunTime.P50.Round(time.Microsecond), k.RunTime.P99.Round(time.Microsecond))
	}
	fmt.Fprintf(out, "  events dropped: %d\n", s.DroppedEvents())
	return nil
}

// produce schedules 20 emails and 2 invoices every 100 ms for d.
func produce(ctx context.Context, s *ax.Scheduler, d time.Duration) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	reqs := make([]ax.Request, 0, 22)
	for range 20 {
		reqs = append(reqs, ax.Request{Kind: "email.send", Payload: map[string]string{"to": "someone@example.com"}})
	}
	reqs = append(reqs, ax.Request{Kind: "invoice.render"}, ax.Request{Kind: "invoice.render"})
	for {
		if _, err := s.ScheduleMany(ctx, reqs); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-end.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// scrapeAX fetches url and returns its ax_jobs_* counter lines.
func scrapeAX(url string) ([]string, error) {
	resp, err := http.Get(url) //nolint:gosec // our own local server
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "ax_jobs_") && strings.Contains(line, "_total{") {
			lines = append(lines, line)
		}
	}
	return lines, sc.Err()
}

// shutdown stops the metrics server and waits for it.
func shutdown(srv *http.Server, served <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
