package txapis_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/axsched/ax/internal/txapis"
)

// TestList: functions and methods that take a transaction by name, by
// pgx.Tx, by *sql.Tx or by a type parameter Tx are listed; unexported
// ones, those of unexported types, tests and others are not.
func TestList(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

type Store struct{}
type inner struct{}

func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx) error  { return nil }
func (s *Store) Complete(ctx context.Context, t *sql.Tx) error  { return nil }
func (s *Store) Named(ctx context.Context, tx any) error        { return nil }
func (s *Store) Insert(ctx context.Context) error               { return nil }
func (s *Store) insertTx(ctx context.Context, tx pgx.Tx) error  { return nil }
func (inner) InsertTx(ctx context.Context, tx pgx.Tx) error     { return nil }
func ScheduleOf[Tx any](ctx context.Context, x Tx) error        { return nil }
func Generic[T any](ctx context.Context, x T) error             { return nil }
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc TestTx(tx any) {}\n"), 0o600))
	got, err := txapis.List("p", dir)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"p.Store.InsertTx", "p.Store.Complete", "p.Store.Named", "p.ScheduleOf"}, got)
}
