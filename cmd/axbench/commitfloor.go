package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// commitFloorTable is the plain table the floor's inserts go to, in the
// scenario's own database, dropped when the floor is measured.
const commitFloorTable = "axbench_commit_floor"

// commitFloor measures what a durable Schedule costs on this server
// before AX adds anything to it: a one-row INSERT into a plain table (an
// ordinary, WAL-logged one: a temporary table would skip the flush),
// each in a transaction of its own committed with the server's
// synchronous_commit, one at a time at rate per second for dur, on a
// connection of its own, before the scenario's Scheduler starts. Its
// round trip is the floor under the immediate scenario's "from the call"
// figures: a job cannot start before its insert is durable, and that is
// this commit. Under CPU contention the commit's WAL flush dominates: the
// backend that waited on the disk waits again for a CPU to wake up on.
//
// It returns the round trips and the rate reached.
func commitFloor(ctx context.Context, dsn string, rate int, dur time.Duration) (durations, float64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, fmt.Errorf("commit floor: connect: %w", err)
	}
	defer conn.Close(context.Background())
	table := pgx.Identifier{commitFloorTable}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, payload text NOT NULL)"); err != nil {
		return nil, 0, fmt.Errorf("commit floor: create table: %w", err)
	}
	n := max(int(float64(rate)*dur.Seconds()), 1)
	interval := time.Second / time.Duration(rate)
	trips := make(durations, 0, n)
	insert := "INSERT INTO " + table + " (payload) VALUES ($1)"
	begin := time.Now()
	for i := range n {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		t0 := time.Now()
		if _, err := conn.Exec(ctx, insert, "floor"); err != nil {
			return nil, 0, fmt.Errorf("commit floor: insert: %w", err)
		}
		trips = append(trips, time.Since(t0))
	}
	achieved := float64(n) / time.Since(begin).Seconds()
	if _, err := conn.Exec(ctx, "DROP TABLE "+table); err != nil {
		return nil, 0, fmt.Errorf("commit floor: drop table: %w", err)
	}
	return trips, achieved, nil
}
