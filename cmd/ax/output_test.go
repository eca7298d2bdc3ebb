package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestByteSize(t *testing.T) {
	cases := []struct {
		n    int
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{4608, "4.5 KiB"},
		{1<<20 - 100, "1023.9 KiB"},
		{1<<20 - 20, "1.0 MiB"},
		{1 << 20, "1.0 MiB"},
		{3 << 20, "3.0 MiB"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, byteSize(c.n), "%d bytes", c.n)
	}
}
