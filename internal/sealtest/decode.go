package sealtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store"
)

// person is what the decode case's handlers expect.
type person struct {
	Name     string    `json:"name"`
	Birthday time.Time `json:"birthday"`
	Amount   int       `json:"amount"`
}

// personArgs is person for HandleArgs.
type personArgs person

func (personArgs) Kind() string { return "seal.decode.args" }

// testDecodeErrors: a sealed payload that does not decode into the
// handler's type fails its job with an error that names the type and the
// field, never the payload's value, in the job's errors, the logs and
// the events, through Handle, HandleArgs and HandleResult. encoding/json's
// errors quote the value (`parsing time "1990-07-14"`, `cannot unmarshal
// number 1234.56`), which used to be stored in the clear. A plain payload
// keeps encoding/json's error.
func testDecodeErrors(t *testing.T, st store.Store) {
	core, logs := observer.New(zap.DebugLevel)
	events := &eventLog{}
	s := newScheduler(t, st, Ring(t, k1), func(c *ax.Config) {
		c.Logger = zap.New(core)
		c.Observers = []ax.Observer{events}
	})
	never := func(context.Context, *ax.Job, person) error { return nil }
	require.NoError(t, ax.Handle(s, "seal.decode", never))
	require.NoError(t, ax.HandleArgs(s, func(context.Context, *ax.Job, personArgs) error { return nil }))
	require.NoError(t, ax.HandleResult(s, "seal.decode.result", func(context.Context, *ax.Job, person) (int, error) { return 0, nil }))
	cases := []struct {
		name, kind string
		payload    any
		value      string // in the payload: never in the error
		want       []string
	}{
		{"TimeField", "seal.decode", map[string]any{"name": "Ada", "birthday": "1990-07-14"}, "1990-07-14",
			[]string{`field "birthday"`, "sealtest.person", "*time.ParseError"}},
		{"NumberIntoInt", "seal.decode.args", map[string]any{"name": "Ada", "amount": 1234.56}, "1234.56",
			[]string{`field "amount"`, "sealtest.personArgs", "JSON number", "int"}},
		{"NotAnObject", "seal.decode.result", "ada@example.com", "ada@example.com",
			[]string{"sealtest.person", "JSON string"}},
		{"BoolIntoString", "seal.decode", map[string]any{"name": true, "amount": 77731}, "77731",
			[]string{`field "name"`, "JSON bool", "string"}},
	}
	ids := make([]uuid.UUID, len(cases))
	for i, c := range cases {
		res, err := s.Schedule(t.Context(), c.kind, c.payload)
		require.NoError(t, err)
		ids[i] = res.ID
	}
	require.NoError(t, s.Start(t.Context()))
	for i, c := range cases {
		rec := waitFinal(t, st, ids[i])
		require.Equal(t, store.StateDead, rec.State, c.name)
		require.Len(t, rec.Errors, 1, c.name)
		msg := rec.Errors[0].Error
		require.NotContains(t, msg, c.value, "%s: the job's error quotes the sealed payload", c.name)
		for _, w := range c.want {
			require.Contains(t, msg, w, c.name)
		}
	}
	require.NoError(t, s.Stop(t.Context()))
	for _, e := range logs.All() {
		line := fmt.Sprintf("%s %v", e.Message, e.ContextMap())
		for _, c := range cases {
			require.False(t, strings.Contains(line, c.value), "%s: log line quotes the sealed payload: %s", c.name, line)
		}
	}
	events.mu.Lock()
	for _, e := range events.seen {
		for _, c := range cases {
			require.False(t, e.Err != nil && strings.Contains(e.Err.Error(), c.value), "%s: %s event quotes the sealed payload: %v", c.name, e.Kind, e.Err)
		}
	}
	events.mu.Unlock()

	// A plain payload keeps encoding/json's error, value and all.
	plain := newScheduler(t, st, nil)
	require.NoError(t, ax.Handle(plain, "seal.decode.plain", never))
	res, err := plain.Schedule(t.Context(), "seal.decode.plain", map[string]any{"amount": 1234.56})
	require.NoError(t, err)
	require.NoError(t, plain.Start(t.Context()))
	rec := waitFinal(t, st, res.ID)
	require.Contains(t, rec.Errors[0].Error, "1234.56")
}
