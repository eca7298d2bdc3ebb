package ax_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax"
)

// TestSlogLogger: AX's zap lines come out through a slog handler, with
// levels mapped, fields (also those added with With) as attributes, and
// levels below the handler's dropped.
func TestSlogLogger(t *testing.T) {
	var buf bytes.Buffer
	l := ax.SlogLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l = l.With(zap.String("node", "n1"))
	l.Debug("hidden")
	l.Warn("job failed; retrying", zap.String("kind", "mail"), zap.Float64("retry_in_ms", 1500), zap.Error(errors.New("boom")))
	out := buf.String()
	require.NotContains(t, out, "hidden")
	require.Contains(t, out, `level=WARN msg="job failed; retrying" error=boom kind=mail node=n1 retry_in_ms=1500`)
}
