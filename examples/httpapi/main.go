// Command httpapi runs AX with its HTTP API and web dashboard (package
// axhttp): jobs are submitted and operated over signed HTTP requests, and
// watched in a browser.
//
//	go run ./examples/httpapi                               # in-memory store
//	DATABASE_URL=postgres://... go run ./examples/httpapi   # PostgreSQL
//
// It listens on AX_ADDR (default 127.0.0.1:8080) and serves below /ax:
// the API at /ax/api/v1 (its OpenAPI document at
// /ax/api/v1/openapi.json) and the dashboard at /ax/. Requests are signed
// with the key AX_KEY_ID (default "demo") and its secret AX_SECRET (32
// bytes or more; when unset a random one is made and printed once). With
// AX_VIEWER_SECRET set, the key "viewer" reads only. Log in to the
// dashboard with a key ID and its secret.
//
// It handles two kinds: "email" (fails for addresses at example.invalid,
// so the dead letters have something in them) and "report" (also run
// every hour by the periodic schedule "hourly-report"). A job submitted
// with a callback_url has its end POSTed there, signed with the same key
// (set AX_CALLBACKS_PRIVATE=1 to allow callbacks to loopback and private
// addresses, for trying it on one machine).
//
// See client/ for a Go client and axcurl.sh for curl with openssl.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(1)
	}
}

// Email is the payload of the "email" kind.
type Email struct {
	// To is the recipient; addresses at example.invalid fail.
	To string `json:"to"`
	// Subject is the mail's subject.
	Subject string `json:"subject"`
}

// App is AX with its HTTP handler.
type App struct {
	// Scheduler runs the jobs; start and stop it.
	Scheduler *ax.Scheduler
	// Handler serves the API and the dashboard below /ax.
	Handler   http.Handler
	callbacks *axhttp.Callbacks
}

// Options configures NewApp.
type Options struct {
	// Keys are the API keys; the first signs callbacks.
	Keys []axhttp.Key
	// CallbacksPrivate lets callbacks reach loopback and private
	// addresses.
	CallbacksPrivate bool
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Tune adjusts the Scheduler's config (tests make it quicker).
	Tune func(*ax.Config)
}

// NewApp builds AX on st, with its handlers, callbacks, the periodic
// report, and the HTTP handler. Start and Stop it with its Scheduler.
func NewApp(st store.Store, o Options) (*App, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	activity := axhttp.NewActivity(nil)
	cfg := ax.Config{Store: st, Logger: o.Logger, Observers: []ax.Observer{activity}}
	if o.Tune != nil {
		o.Tune(&cfg)
	}
	s, err := ax.New(cfg)
	if err != nil {
		return nil, err
	}
	err = ax.Handle(s, "email", func(_ context.Context, job *ax.Job, e Email) error {
		if strings.HasSuffix(e.To, "@example.invalid") {
			return fmt.Errorf("smtp: 550 no such mailbox %q (attempt %d)", e.To, job.Attempt)
		}
		return nil
	}, ax.MaxAttempts(3))
	if err != nil {
		return nil, err
	}
	if err := ax.Handle(s, "report", func(context.Context, *ax.Job, map[string]any) error { return nil }); err != nil {
		return nil, err
	}
	if err := s.Every("hourly-report", "0 * * * *", map[string]string{"scope": "all"}, ax.JobKind("report")); err != nil && !errors.Is(err, ax.ErrPeriodicUnsupported) {
		return nil, err
	}
	policy := axhttp.CallbackPolicy{AllowPrivate: o.CallbacksPrivate}
	cb, err := axhttp.RegisterCallbacks(s, axhttp.CallbackConfig{
		Signer: axhttp.Signer{KeyID: o.Keys[0].ID, Secret: o.Keys[0].Secret}, Policy: policy})
	if err != nil {
		return nil, err
	}
	nonces, shared := axhttp.NoncesFor(st)
	if !shared {
		o.Logger.Warn("the store keeps no request nonces: run one API server, or use a store that does")
	}
	auth, err := axhttp.NewAuth(axhttp.AuthConfig{Keys: o.Keys, Nonces: nonces})
	if err != nil {
		return nil, err
	}
	h, err := axhttp.New(axhttp.Config{
		Scheduler: s, Auth: auth, Logger: o.Logger, Activity: activity, CallbackPolicy: &policy,
		RateLimit: axhttp.RateLimit{PerSecond: 50, Burst: 100},
		// Per client address, before authentication: a flood, or a brute
		// force of signatures or logins, gets 429 early. Behind a reverse
		// proxy, list it in TrustedProxies, or every client shares the
		// proxy's address (and its limits).
		ClientRateLimit: axhttp.RateLimit{PerSecond: 50, Burst: 100},
		FailureLimit:    axhttp.RateLimit{PerSecond: 1, Burst: 20},
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/ax/", http.StripPrefix("/ax", h))
	mux.Handle("GET /{$}", http.RedirectHandler("/ax/", http.StatusFound))
	return &App{Scheduler: s, Handler: mux, callbacks: cb}, nil
}

// Close releases the callback client's connections.
func (a *App) Close() { a.callbacks.Close() }

func run(ctx context.Context, getenv func(string) string, out io.Writer) error {
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	st, where, closeStore, err := openStore(ctx, getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer closeStore()

	keyID, secret := getenv("AX_KEY_ID"), getenv("AX_SECRET")
	if keyID == "" {
		keyID = "demo"
	}
	if secret == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		secret = hex.EncodeToString(b)
		fmt.Fprintf(out, "No AX_SECRET set: made one for this run. Key %q, secret:\n  %s\n", keyID, secret)
	}
	keys := []axhttp.Key{{ID: keyID, Secret: []byte(secret)}}
	if v := getenv("AX_VIEWER_SECRET"); v != "" {
		keys = append(keys, axhttp.Key{ID: "viewer", Secret: []byte(v), ReadOnly: true})
	}
	app, err := NewApp(st, Options{Keys: keys, CallbacksPrivate: getenv("AX_CALLBACKS_PRIVATE") == "1", Logger: log})
	if err != nil {
		return err
	}
	defer app.Close()
	if err := app.Scheduler.Start(ctx); err != nil {
		return err
	}
	addr := getenv("AX_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	srv := newServer(addr, app.Handler)
	fmt.Fprintf(out, "AX on %s\n  dashboard: http://%s/ax/\n  API:       http://%s/ax/api/v1 (OpenAPI: /ax/api/v1/openapi.json)\n", where, addr, addr)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
		if serr := <-errc; err == nil && !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := app.Scheduler.Stop(sctx); err == nil {
		err = serr
	}
	return err
}

// newServer returns the HTTP server of handler on addr, with timeouts
// that keep slow or idle clients from holding connections open forever:
// the headers within 10 s, the whole request within a minute (the API's
// bodies are at most 4 MiB), the response within a minute, and an idle
// keep-alive connection two minutes. Without them a client that sends
// one byte a minute holds a connection (and its goroutine) for good.
func newServer(addr string, handler http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
