package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEncryptionExample runs the example and checks its story.
func TestEncryptionExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"sealed 1 job(s) stored before encryption was on",
		"sealed with key 2026-11",
		`read with the ring: {"email":"ada@example.com","name":"Ada"} (invite tok-123)`,
		"removing 2026-11 refused: 2 job(s) need it",
		"re-encrypted 2 of 2 job(s) with 2026-12",
		"2026-11 can leave the ring",
		"handler: welcome Ada <ada@example.com>, invite tok-123",
		`result: "sent to ada@example.com" (stored sealed with 2026-12)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(strings.SplitN(got, "\n", 2)[0], "ada@") {
		t.Errorf("the stored payload shows the address:\n%s", got)
	}
}
