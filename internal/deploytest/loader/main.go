// Command loader is the client of the deployment scenarios (package
// deploytest): it schedules "work" jobs, the kind internal/faulttest/worker
// runs, at a steady rate through an AX Scheduler that is never started,
// and prints the ID of every job whose Schedule returned, so the test
// knows which jobs must exist whatever happens to the database.
//
// It uses only API that AX had in its first release (ax.New, Schedule,
// In, pgstore.New, WithoutMigrate), so the upgrade scenario builds this
// same file against the previous release's source.
//
// Stdout:
//
//	MIGRATED                  -migrate: the schema is at this build's version
//	READY                     the client is set up; scheduling starts
//	SCHEDULED <job id>        Schedule returned this job
//	ERROR <message>           Schedule returned an error (the job may or may not exist)
//	DONE <scheduled> <errors> -n jobs were attempted, or SIGTERM arrived
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/pgstore"
)

func main() {
	var (
		dsn     = flag.String("dsn", "", "PostgreSQL connection string (required)")
		migrate = flag.Bool("migrate", false, "migrate the schema to this build's version and exit")
		n       = flag.Int("n", 1000, "jobs to schedule")
		rate    = flag.Int("rate", 50, "jobs per second")
		spread  = flag.Duration("spread", 2*time.Second, "delays cycle over [0, spread) in ten steps")
		ms      = flag.Int("ms", 100, "each job's work, in milliseconds")
		timeout = flag.Duration("timeout", 5*time.Second, "each Schedule call's deadline")
	)
	flag.Parse()
	if err := run(*dsn, *migrate, *n, *rate, *spread, *ms, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "loader:", err)
		os.Exit(1)
	}
}

func run(dsn string, migrate bool, n, rate int, spread time.Duration, ms int, timeout time.Duration) error {
	if dsn == "" {
		return fmt.Errorf("-dsn is required")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if migrate {
		st, err := pgstore.New(ctx, pool)
		if err != nil {
			return err
		}
		st.Close()
		fmt.Println("MIGRATED")
		return nil
	}
	st, err := pgstore.New(ctx, pool, pgstore.WithoutMigrate())
	if err != nil {
		return err
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("READY")
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	scheduled, failed := 0, 0
loop:
	for i := 0; i < n; i++ {
		select {
		case <-sig:
			break loop
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := s.Schedule(cctx, "work", map[string]int{"ms": ms}, ax.In(time.Duration(i%10)*spread/10))
		cancel()
		if err != nil {
			failed++
			fmt.Printf("ERROR %v\n", err)
			continue
		}
		scheduled++
		fmt.Printf("SCHEDULED %s\n", res.ID)
	}
	fmt.Printf("DONE %d %d\n", scheduled, failed)
	return nil
}
