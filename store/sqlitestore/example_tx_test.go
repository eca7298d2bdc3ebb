package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/axsched/ax"
	"github.com/axsched/ax/store/sqlitestore"
)

// ReminderArgs reminds a user of something; a user gets one reminder
// pending at a time.
type ReminderArgs struct {
	User string `json:"user"`
}

func (ReminderArgs) Kind() string { return "reminder.send" }

func (a ReminderArgs) ScheduleOptions() []ax.ScheduleOption {
	return []ax.ScheduleOption{ax.UniqueKey("reminder:" + a.User)}
}

// Example_enqueueTx schedules typed jobs in the application's own
// transaction on the store's file: the signup rows and their reminders
// commit together, or neither does.
func Example_enqueueTx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ax-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	s, err := ax.New(ax.Config{Store: st})
	if err != nil {
		panic(err)
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE users (name TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}

	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	users := []ReminderArgs{{User: "ada"}, {User: "grace"}}
	for _, u := range users {
		if _, err := tx.ExecContext(ctx, `INSERT INTO users VALUES (?)`, u.User); err != nil {
			panic(err)
		}
	}
	res, err := ax.EnqueueManyTx(ctx, s, tx, users)
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	for _, r := range res {
		rec, err := s.Get(ctx, r.ID)
		if err != nil {
			panic(err)
		}
		fmt.Println(rec.Kind, rec.UniqueKey, rec.State)
	}
	// Output:
	// reminder.send reminder:ada scheduled
	// reminder.send reminder:grace scheduled
}
