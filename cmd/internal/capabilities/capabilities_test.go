package capabilities

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/axsched/ax/store"
	"github.com/axsched/ax/store/memstore"
	"github.com/axsched/ax/store/pgstore"
	"github.com/axsched/ax/store/sqlitestore"
)

// stores are the table's rows, in order.
var stores = []struct {
	name string
	st   any // a nil pointer of the store's type
}{
	{"memstore", (*memstore.Store)(nil)},
	{"sqlitestore", (*sqlitestore.Store)(nil)},
	{"pgstore", (*pgstore.Store)(nil)},
	{"pgstore on Citus", (*pgstore.CitusStore)(nil)},
}

// is reports whether st implements all of ts ("yes"/"no").
func is(st any, ts ...reflect.Type) string {
	for _, t := range ts {
		if !reflect.TypeOf(st).Implements(t) {
			return "no"
		}
	}
	return "yes"
}

// iface returns the interface type T.
func iface[T any]() reflect.Type { return reflect.TypeFor[T]() }

// txOf returns the transaction type the store's method takes (its second
// argument after the context), or "no" without the method.
func txOf(st any, method string) string {
	m, ok := reflect.TypeOf(st).MethodByName(method)
	if !ok {
		return "no"
	}
	return "`" + m.Type.In(2).String() + "`"
}

// columns are the table's columns after the store's name: the heading
// and the cell of a store.
var columns = []struct {
	head string
	cell func(st any) string
}{
	{"flow control", func(st any) string { return is(st, iface[store.FlowStore]()) }},
	{"partition breakers", func(st any) string { return is(st, iface[store.PartitionBreakerStore]()) }},
	{"periodic", func(st any) string { return is(st, iface[store.PeriodicStore]()) }},
	{"results, Then, FollowUp", func(st any) string { return is(st, iface[store.FollowUpStore]()) }},
	{"batches", func(st any) string { return is(st, iface[store.BatchStore]()) }},
	{"cluster", func(st any) string { return is(st, iface[store.Leaser](), iface[store.NodeRegistry]()) }},
	{"operator API", func(st any) string {
		return is(st, iface[store.JobInspector](), iface[store.BulkController](), iface[store.KindPauser](),
			iface[store.PeriodicController](), iface[store.LeaderReader](), iface[store.DueInspector]())
	}},
	{"ScheduleTx", func(st any) string { return txOf(st, "InsertTx") }},
	{"CompleteTx", func(st any) string { return txOf(st, "CompleteTx") }},
	{"ScheduleBatchTx", func(st any) string { return txOf(st, "InsertBatchTx") }},
	{"direct start", func(st any) string { return is(st, iface[store.InsertClaimer]()) }},
	{"claim with outcomes", func(st any) string { return is(st, iface[store.FinishClaimer]()) }},
	{"history table", func(st any) string { return is(st, iface[store.Archiver]()) }},
}

// table returns the capability table as the README must hold it.
func table() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	head := []string{"store"}
	rule := []string{"---"}
	for _, c := range columns {
		head = append(head, c.head)
		rule = append(rule, ":-:")
	}
	row(head)
	row(rule)
	for _, s := range stores {
		cells := []string{"`" + s.name + "`"}
		for _, c := range columns {
			cells = append(cells, c.cell(s.st))
		}
		row(cells)
	}
	return b.String()
}

// TestREADMETable: the README's capability table is what the stores
// implement, cell for cell. On a failure, the message holds the table to
// paste.
func TestREADMETable(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := table()
	if !strings.Contains(string(readme), want) {
		t.Fatalf("the README's capability table does not match the stores; it should read:\n\n%s", want)
	}
}
