package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// serverInfo says which PostgreSQL server the figures come from: every
// figure depends on its settings (autovacuum above all), so the report
// names the server in each scenario's header and lists its non-default
// settings once at the top.
type serverInfo struct {
	Kind     string          `json:"kind"` // "shared" (-db) or "private" (-private)
	Addr     string          `json:"addr"`
	Version  string          `json:"version"`
	Settings []serverSetting `json:"settings"`  // every setting not at its built-in default
	Key      string          `json:"key"`       // the settings that matter most here, default or not
	RTT      string          `json:"added_rtt"` // the round trip -rtt adds to every connection ("0s": none)
}

type serverSetting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// describeServer reads the server's version and its non-default settings.
// Settings of our own session (source client or session, and the
// per-transaction ones PostgreSQL reports as overrides) are left out.
func describeServer(ctx context.Context, conn *pgx.Conn, kind, dsn string) (serverInfo, error) {
	si := serverInfo{Kind: kind, Addr: hostPort(dsn)}
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'),
		format('autovacuum=%s shared_buffers=%s synchronous_commit=%s max_wal_size=%s',
			current_setting('autovacuum'), current_setting('shared_buffers'),
			current_setting('synchronous_commit'), current_setting('max_wal_size'))`).Scan(&si.Version, &si.Key); err != nil {
		return si, err
	}
	rows, err := conn.Query(ctx, `SELECT name, current_setting(name), source FROM pg_settings
		WHERE source NOT IN ('default', 'client', 'session')
		  AND name NOT IN ('transaction_deferrable', 'transaction_isolation', 'transaction_read_only')
		ORDER BY name`)
	if err != nil {
		return si, err
	}
	si.Settings, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (serverSetting, error) {
		var s serverSetting
		err := r.Scan(&s.Name, &s.Value, &s.Source)
		return s, err
	})
	return si, err
}

// label is how a scenario's header names the server.
func (si serverInfo) label() string {
	return fmt.Sprintf("%s server %s, added round trip %s, %s (all non-default settings at the top)", si.Kind, si.Addr, si.RTT, si.Key)
}

func (si serverInfo) print(w io.Writer) {
	fmt.Fprintf(w, "axbench: %s server at %s, PostgreSQL %s; added round trip %s (-rtt); non-default settings:\n", si.Kind, si.Addr, si.Version, si.RTT)
	for _, s := range si.Settings {
		fmt.Fprintf(w, "   %s = %s  (%s)\n", s.Name, s.Value, s.Source)
	}
}

// hostPort returns the host:port of a connection string, without user or
// password.
func hostPort(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		if u, err := url.Parse(dsn); err == nil {
			return u.Host
		}
		return "?"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
