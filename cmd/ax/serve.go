package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/axsched/ax"
	"github.com/axsched/ax/axhttp"
	"github.com/axsched/ax/store"
)

// ax serve's default limits per client address: generous for a browser
// (a page and its assets) and a busy client, and a brute force or flood
// of bad signatures gets 429 after 20 failures, then one a second.
const (
	defaultClientRate   = 50
	defaultClientBurst  = 100
	defaultFailureRate  = 1
	defaultFailureBurst = 20
)

// parseProxies parses --trusted-proxy: addresses (a /32 or /128) or CIDR
// prefixes.
func parseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usageErrorf("--trusted-proxy %q: want an address or a CIDR prefix (10.0.0.0/8)", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseCallbackHosts checks --callback-host: host names ("hooks.example.com")
// or domains (".example.com"), without a scheme, port or path, which
// CallbackPolicy would never match.
func parseCallbackHosts(list []string) ([]string, error) {
	var out []string
	for _, s := range list {
		h := strings.ToLower(strings.TrimSpace(s))
		name := strings.TrimPrefix(h, ".")
		if name == "" || strings.ContainsAny(name, ":/@?#[] ") || strings.HasPrefix(name, ".") {
			return nil, usageErrorf("--callback-host %q: want a host name (hooks.example.com) or a domain (.example.com), without scheme, port or path", s)
		}
		out = append(out, h)
	}
	return out, nil
}

// serveCmd is ax serve: the HTTP API and the dashboard (package axhttp)
// on the cluster's store, until interrupted. It runs no jobs: submitted
// jobs wait for the hosts that handle their kinds, and callback URLs are
// delivered by hosts running axhttp.RegisterCallbacks.
func serveCmd(fs *flag.FlagSet) func(*env, []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "listen on this address")
	keysFile := fs.String("keys-file", "", "API keys, one per line: ID SECRET [read-only] (secrets of 32 bytes or more; # comments)")
	noAuth := fs.Bool("no-auth", false, "serve without authentication (only behind a proxy that authenticates)")
	prefix := fs.String("prefix", "/", "serve below this path (/ax)")
	readOnly := fs.Bool("read-only", false, "serve reads only, whoever asks")
	rate := fs.Float64("rate", 0, "requests per second per key (0: no limit)")
	burst := fs.Int("burst", 20, "requests a key may make at once, with --rate")
	clientRate := fs.Float64("client-rate", defaultClientRate, "requests per second per client address, before authentication (0: no limit)")
	clientBurst := fs.Int("client-burst", defaultClientBurst, "requests a client address may make at once, with --client-rate")
	failureRate := fs.Float64("failure-rate", defaultFailureRate, "failed authentications per second per client address, after --failure-burst (0: no limit)")
	failureBurst := fs.Int("failure-burst", defaultFailureBurst, "failed authentications a client address may make before it gets 429")
	var proxies listFlag
	fs.Var(&proxies, "trusted-proxy", "addresses or CIDR prefixes of reverse proxies whose X-Forwarded-For names the client (repeatable, comma-separated)")
	secureCookies := fs.Bool("secure-cookies", false, "mark the dashboard's cookies Secure (behind a proxy that terminates TLS; implied by --tls-cert)")
	sessionTTL := fs.Duration("session-ttl", axhttp.DefaultSessionTTL, "how long a dashboard login lasts at most")
	sessionIdle := fs.Duration("session-idle", axhttp.DefaultSessionIdleTimeout, "end a dashboard session after this long without a request (0: never)")
	var callbackHosts listFlag
	fs.Var(&callbackHosts, "callback-host", "the only hosts a submitted job's callback_url may name (exact names, or .example.com for a domain and its subdomains; repeatable, comma-separated; default: any public host)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate file (and --tls-key)")
	tlsKey := fs.String("tls-key", "", "the certificate's key file")
	plain := fs.Bool("plain", false, "without --encryption-keys, serve even though the cluster's stored jobs are encrypted (jobs submitted through the API are then stored plain)")
	logFormat := fs.String("log-format", "auto", "the log on standard error: text (for people), json (one object a line), or auto: text on a terminal, json otherwise")
	return func(e *env, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		log, err := serveLogger(*logFormat, e.stderr)
		if err != nil {
			return err
		}
		trusted, err := parseProxies(proxies)
		if err != nil {
			return err
		}
		allowed, err := parseCallbackHosts(callbackHosts)
		if err != nil {
			return err
		}
		if *sessionIdle == 0 {
			*sessionIdle = -1 // axhttp: negative means none
		}
		if (*keysFile == "") == !*noAuth {
			return usageErrorf("give --keys-file, or --no-auth behind an authenticating proxy")
		}
		if (*tlsCert == "") != (*tlsKey == "") {
			return usageErrorf("give both --tls-cert and --tls-key, or neither")
		}
		p := "/" + strings.Trim(*prefix, "/")
		if p == "/" {
			p = ""
		}
		var keys []axhttp.Key
		if *keysFile != "" {
			k, err := readKeys(*keysFile)
			if err != nil {
				return err
			}
			keys = k
		}
		st, release, err := e.open.Store(e.ctx, connection{url: e.global.url, schema: e.global.schema, writes: true})
		if err != nil {
			return err
		}
		defer release()
		// A Scheduler that is never started: it schedules submitted jobs
		// and answers for the cluster, and runs nothing.
		ring, err := e.keyRing() // encryption.go
		if err != nil {
			return err
		}
		if ring == nil && !*readOnly {
			// A server without the ring would store the jobs submitted to
			// it plain, on a cluster whose hosts seal theirs.
			sealed, err := clusterEncrypts(e.ctx, st) // encryption.go
			if err != nil {
				return err
			}
			if sealed != "" && !*plain {
				return usageErrorf("the cluster encrypts its jobs (%s): give --encryption-keys (or AX_ENCRYPTION_KEYS) so that submitted jobs are sealed too, --read-only, or --plain to store them plain", sealed)
			}
			if sealed != "" {
				log.Warn("serving without the key ring on a cluster that encrypts its jobs (--plain): jobs submitted through the API are stored plain", zap.String("seen", sealed))
			}
		}
		s, err := ax.New(ax.Config{Store: st, Logger: log, Node: "ax-serve", Keys: ring})
		if err != nil {
			return err
		}
		defer func() { _ = s.Stop(context.Background()) }()
		cfg := axhttp.Config{Scheduler: s, Logger: log, ReadOnly: *readOnly, SecureCookies: *tlsCert != "" || *secureCookies,
			RateLimit:       axhttp.RateLimit{PerSecond: *rate, Burst: *burst},
			ClientRateLimit: axhttp.RateLimit{PerSecond: *clientRate, Burst: *clientBurst},
			FailureLimit:    axhttp.RateLimit{PerSecond: *failureRate, Burst: *failureBurst},
			TrustedProxies:  trusted, SessionTTL: *sessionTTL, SessionIdleTimeout: *sessionIdle,
			CallbackPolicy: &axhttp.CallbackPolicy{AllowedHosts: allowed}}
		if sk := os.Getenv("AX_SESSION_KEY"); sk != "" {
			cfg.SessionKey = []byte(sk)
		} else if keys != nil {
			log.Warn("AX_SESSION_KEY is not set: dashboard sessions end when this process does, and other ax serve processes refuse its cookies; set the same key of 32 bytes or more on every one")
		}
		if _, ok := st.(store.RevocationKeeper); !ok && keys != nil {
			log.Warn("the store keeps no revocations: a dashboard logout holds on this ax serve process only")
		}
		if keys != nil {
			nonces, shared := axhttp.NoncesFor(st)
			if !shared {
				log.Warn("the store keeps no nonces: each ax serve process remembers its own, so run one behind an address")
			}
			auth, err := axhttp.NewAuth(axhttp.AuthConfig{Keys: keys, Nonces: nonces})
			if err != nil {
				return usageErrorf("--keys-file: %v", err)
			}
			cfg.Auth = auth
		}
		if keys == nil {
			log.Warn("serving without authentication: every request is trusted; put an authenticating proxy in front")
		}
		h, err := axhttp.New(cfg)
		if err != nil {
			return usageErrorf("%v", err)
		}
		mux := http.NewServeMux()
		if p == "" {
			mux.Handle("/", h)
		} else {
			mux.Handle(p+"/", http.StripPrefix(p, h))
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: zap.NewStdLog(log)}
		scheme := "http"
		if *tlsCert != "" {
			scheme = "https"
		}
		fmt.Fprintf(e.stdout, "ax serve: listening on %s://%s%s/\n", scheme, ln.Addr(), p)
		done := make(chan error, 1)
		go func() {
			if *tlsCert != "" {
				done <- srv.ServeTLS(ln, *tlsCert, *tlsKey)
				return
			}
			done <- srv.Serve(ln)
		}()
		select {
		case err := <-done:
			return fmt.Errorf("serve: %w", err)
		case <-e.ctx.Done():
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = srv.Shutdown(ctx)
		if serr := <-done; err == nil && !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("shut down: %w", err)
		}
		fmt.Fprintln(e.stdout, "ax serve: stopped")
		return nil
	}
}

// serveLogger returns ax serve's log, written to w: format "text" writes
// lines for people (time to the millisecond, level, message, then the
// fields as JSON), "json" one JSON object a line (zap's production
// encoding, for log collectors), and "auto" text when w is a terminal,
// json otherwise.
func serveLogger(format string, w io.Writer) (*zap.Logger, error) {
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	case "text":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02T15:04:05.000Z07:00")
		cfg.EncodeCaller, cfg.CallerKey, cfg.StacktraceKey = nil, "", ""
		enc = zapcore.NewConsoleEncoder(cfg)
	default:
		return nil, usageErrorf("--log-format: want auto, text or json, got %q", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zap.InfoLevel)), nil
}

// readKeys reads a keys file: one key a line, "ID SECRET" or "ID SECRET
// read-only"; blank lines and lines starting with # are skipped.
func readKeys(path string) ([]axhttp.Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErrorf("--keys-file: %v", err)
	}
	defer f.Close()
	var keys []axhttp.Key
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		switch {
		case len(fields) == 2:
			keys = append(keys, axhttp.Key{ID: fields[0], Secret: []byte(fields[1])})
		case len(fields) == 3 && fields[2] == "read-only":
			keys = append(keys, axhttp.Key{ID: fields[0], Secret: []byte(fields[1]), ReadOnly: true})
		default:
			// The line may hold a secret: name the line, not its text.
			return nil, usageErrorf("--keys-file %s:%d: want ID SECRET [read-only]", path, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--keys-file: %w", err)
	}
	if len(keys) == 0 {
		return nil, usageErrorf("--keys-file %s: no keys", path)
	}
	return keys, nil
}
