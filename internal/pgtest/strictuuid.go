package pgtest

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StrictUUIDs makes the pools of cfg refuse a uuid.UUID (or a pointer to,
// slice or array of them) as a uuid or uuid[] value to send or a target
// to scan into: the statement fails with an error naming the Go type.
//
// pgx has no plan of its own for uuid.UUID. It sends one through its
// driver.Valuer: Value formats the string, a binary encode of that string
// fails and builds an error with fmt, and pgx then parses the string back
// into bytes: 1.5 µs per ID against 0.09 µs for a [16]byte, and most of
// the 18 % of axbench's CPU samples that ScheduleMany's COPY took in a
// throughput run of 400,000 jobs. It scans one through its sql.Scanner,
// as text. A [16]byte, which
// uuid.UUID converts to and from for free, takes pgx's direct binary
// path. pgstore passes every ID as [16]byte. Every pgtest pool (Pool,
// PoolFor, Schemas.Pool) is strict, so a statement of the stores' that
// takes a uuid.UUID fails in whichever test reaches it; tests write IDs
// as [16]byte too.
func StrictUUIDs(cfg *pgxpool.Config) {
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		m := conn.TypeMap()
		elem := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: strictUUIDCodec{}}
		m.RegisterType(elem)
		m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: elem}})
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}

// IDs returns ids as the [16]byte values a strict pool takes: for tests
// that send a slice of IDs in their own statements.
func IDs(ids []uuid.UUID) [][16]byte {
	b := make([][16]byte, len(ids))
	for i, id := range ids {
		b[i] = id
	}
	return b
}

// strictUUIDCodec is pgx's UUIDCodec, refusing uuid.UUID values.
type strictUUIDCodec struct{ pgtype.UUIDCodec }

// PlanEncode refuses a value holding a uuid.UUID.
func (c strictUUIDCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if holdsGoogleUUID(reflect.TypeOf(value)) {
		return refusedUUID{value}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

// PlanScan refuses a target holding a uuid.UUID.
func (c strictUUIDCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if holdsGoogleUUID(reflect.TypeOf(target)) {
		return refusedUUID{target}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

// holdsGoogleUUID reports whether t is uuid.UUID, or pointers to, slices
// or arrays of it.
func holdsGoogleUUID(t reflect.Type) bool {
	for t != nil {
		if t == reflect.TypeFor[uuid.UUID]() {
			return true
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			t = t.Elem()
		default:
			return false
		}
	}
	return false
}

// refusedUUID is the plan of a refused value or target: it fails.
type refusedUUID struct{ v any }

func (r refusedUUID) err() error {
	return fmt.Errorf("pgtest.StrictUUIDs: %T reached pgx as a uuid%s; pass [16]byte(id) (or scan into (*[16]byte)(&id)): pgx sends a uuid.UUID through a failing plan and scans one as text", r.v, caller())
}

// caller returns " at file:line < file:line" of the two innermost frames
// of the calling goroutine outside pgx, this package and the runtime (the
// statement's call and its caller, for a helper that runs statements), or
// "".
func caller() string {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	var at []string
	for len(at) < 2 {
		f, more := frames.Next()
		if !strings.Contains(f.Function, "jackc/pgx") && !strings.HasPrefix(f.Function, "runtime.") &&
			!strings.Contains(f.Function, "internal/pgtest.") && f.File != "" {
			at = append(at, fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line))
		}
		if !more {
			break
		}
	}
	if len(at) == 0 {
		return ""
	}
	return " at " + strings.Join(at, " < ")
}

// Encode fails.
func (r refusedUUID) Encode(any, []byte) ([]byte, error) { return nil, r.err() }

// Scan fails.
func (r refusedUUID) Scan([]byte, any) error { return r.err() }
