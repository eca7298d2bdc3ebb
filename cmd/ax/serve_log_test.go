package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/axsched/ax/store/memstore"
)

// terminalBuffer is a standard error that says it is a terminal.
type terminalBuffer struct{ bytes.Buffer }

func (*terminalBuffer) IsTerminal() bool { return true }

// textLine is one line of the text log: time to the millisecond, level,
// message.
var textLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\tWARN\tsession key missing\t\{"node": "n1"\}$`)

// TestServeLogFormat: the log is text on a terminal and JSON elsewhere,
// unless --log-format says; never both in one run.
func TestServeLogFormat(t *testing.T) {
	cases := []struct {
		name     string
		format   string
		terminal bool
		json     bool
	}{
		{"AutoTerminal", "auto", true, false},
		{"AutoPipe", "auto", false, true},
		{"TextPipe", "text", false, false},
		{"JSONTerminal", "json", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var w interface {
				Write([]byte) (int, error)
				String() string
			} = &bytes.Buffer{}
			if tc.terminal {
				w = &terminalBuffer{}
			}
			log, err := serveLogger(tc.format, w)
			require.NoError(t, err)
			log.Warn("session key missing", zap.String("node", "n1"))
			line := strings.TrimSuffix(w.String(), "\n")
			var obj map[string]any
			require.Equal(t, tc.json, json.Unmarshal([]byte(line), &obj) == nil, "JSON? %q", line)
			require.Equal(t, !tc.json, textLine.MatchString(line), "text? %q", line)
		})
	}
	_, err := serveLogger("yaml", &bytes.Buffer{})
	require.Equal(t, exitUsage, exitCode(err))
}

// TestServeTextLog: ax serve --log-format text writes no JSON line to
// standard error, warnings and request logs included.
func TestServeTextLog(t *testing.T) {
	t.Setenv("AX_SESSION_KEY", "") // its absence is warned about
	base, errOut := startServe(t, memstore.New(), "--log-format", "text")
	res, err := http.Get(base + "/login")
	require.NoError(t, err)
	res.Body.Close()
	require.Contains(t, errOut.String(), "\tWARN\tAX_SESSION_KEY is not set")
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		require.NotRegexp(t, `^\{`, line, "a JSON line in the text log")
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\t(INFO|WARN|ERROR)\t`, line)
	}
}
