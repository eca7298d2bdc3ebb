//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitestore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/store/sqlitestore"
)

// TestLock checks that a file serves one Store at a time.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ax.db")
	st, err := sqlitestore.Open(t.Context(), path)
	require.NoError(t, err)
	_, err = sqlitestore.Open(t.Context(), path)
	require.ErrorIs(t, err, sqlitestore.ErrLocked)
	require.Contains(t, err.Error(), "another Store of this process")
	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "Close twice")

	again, err := sqlitestore.Open(t.Context(), path)
	require.NoError(t, err, "the lock is released by Close")
	require.NoError(t, again.Close())
}

// TestLockThroughSymlink checks that a symbolic link to the file, or to
// its directory, takes the same lock.
func TestLockThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ax.db")
	st, err := sqlitestore.Open(t.Context(), path)
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, os.Symlink(path, filepath.Join(dir, "link.db")))
	_, err = sqlitestore.Open(t.Context(), filepath.Join(dir, "link.db"))
	require.ErrorIs(t, err, sqlitestore.ErrLocked)
	linkDir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Symlink(dir, linkDir))
	_, err = sqlitestore.Open(t.Context(), filepath.Join(linkDir, "ax.db"))
	require.ErrorIs(t, err, sqlitestore.ErrLocked)
}
