package pgstore

import (
	"errors"
	"fmt"
	"regexp"
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
// idConstraint matches the constraints that keep job and batch IDs
// unique: the primary keys of jobs and batches, and on Citus the shards'
// copies of jobs' and of job_ids' (named with the shard's ID after them).
var idConstraint = regexp.MustCompile(`^(jobs_pkey|batches_pkey|job_ids_pkey)(_[0-9]+)?$`)

func invalidData(err error) error {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
		return err
	case pe.Code == "23505" && idConstraint.MatchString(pe.ConstraintName):
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
