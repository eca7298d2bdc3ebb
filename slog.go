package ax

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// SlogLogger returns a *zap.Logger that writes through l, for services
// that log with log/slog: ax.Config{Logger: ax.SlogLogger(slog.Default())}.
// Levels map to slog's (debug, info, warn, error; zap's higher levels are
// errors), and fields become attributes, sorted by key. A nil l means
// slog.Default().
func SlogLogger(l *slog.Logger) *zap.Logger {
	if l == nil {
		l = slog.Default()
	}
	return zap.New(&slogCore{h: l.Handler()})
}

// slogCore is a zapcore.Core writing to a slog.Handler.
type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// Enabled implements zapcore.LevelEnabler.
func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

// With implements zapcore.Core.
func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h, fields: append(slices.Clip(c.fields), fields...)}
}

// Check implements zapcore.Core.
func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write implements zapcore.Core.
func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return c.h.Handle(context.Background(), r)
}

// Sync implements zapcore.Core; slog handlers have nothing to flush.
func (c *slogCore) Sync() error { return nil }
