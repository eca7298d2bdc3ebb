package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/axsched/ax/store"
)

// invalidData returns err wrapping store.ErrInvalidParams as well when it
// is PostgreSQL refusing the data of the call: a data exception (SQLSTATE
// class 22, such as 22021 invalid byte sequence, 22P05 untranslatable
// character or 22008 datetime field overflow) or a check violation
// (23514). The *pgconn.PgError stays in the chain for errors.As. Retrying
// such a call can never succeed, so it must not pass for a transient
// failure; the params' Validate methods refuse nearly all of it before a
// statement is sent, and this covers the rest (texts no Validate checks,
// constraints an operator added), or an ID that already exists: a unique
// violation of the jobs' or batches' primary key (an explicit ID reused;
// the store.Store contract makes it ErrInvalidParams). Other errors, nil
// included, are returned as they are.
func invalidData(err error) error {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
		return err
	case pe.Code == "23505" && (pe.ConstraintName == "jobs_pkey" || pe.ConstraintName == "batches_pkey"):
		return fmt.Errorf("%w: an ID already exists: %w", store.ErrInvalidParams, err)
	case strings.HasPrefix(pe.Code, "22") || pe.Code == "23514":
		return fmt.Errorf("%w: %w", store.ErrInvalidParams, err)
	}
	return err
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
