package orders_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestApplyAndGet: the order read back with the UPDATE is the order as a
// later read returns it; a refused transition changes nothing and reads
// nothing back; and the read-back sees the latest committed row, not the
// transaction's older snapshot.
func TestApplyAndGet(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc := orders.NewService(nil, nil)
	create := func(mon string) orders.Order {
		t.Helper()
		var o orders.Order
		err := d.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) (err error) {
			o, err = svc.Create(ctx, tx, "acme", orders.CreateInput{MerchantOrderNo: mon, Amount: 1999, Currency: "EUR", Description: "d"})
			return err
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return o
	}
	get := func(no string) orders.Order {
		t.Helper()
		o, err := orders.Get(ctx, d.Gorm, "acme", no)
		if err != nil {
			t.Fatalf("get %s: %v", no, err)
		}
		return o
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	paid := func(no string, amount int64) orders.Transition {
		return orders.Transition{OrderNo: no, From: orders.Created, To: orders.Paid, At: at, Amount: amount, Currency: "EUR"}
	}

	o := create("aag-1")
	got, err := paid(o.OrderNo, 1999).ApplyAndGet(ctx, d.Gorm)
	if err != nil {
		t.Fatalf("pay: %v", err)
	}
	if want := get(o.OrderNo); !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v\nlater read %+v", got, want)
	}
	if got.Status != orders.Paid || got.Version != 2 || got.PaidAt == nil || !got.PaidAt.Equal(at) || !got.UpdatedAt.Equal(at) {
		t.Errorf("read back %+v, want PAID, version 2, paid and updated at %v", got, at)
	}

	// Refusals: already PAID, a wrong amount, another merchant's order, an
	// order number that cannot exist. None changes a row.
	other := create("aag-2")
	for name, tr := range map[string]orders.Transition{
		"already paid":     paid(o.OrderNo, 1999),
		"wrong amount":     paid(other.OrderNo, 1),
		"another merchant": {OrderNo: other.OrderNo, MerchantID: "globex", From: orders.Created, To: orders.Closed, At: at},
		"invalid number":   paid("ord_nope", 1999),
		"illegal":          {OrderNo: other.OrderNo, From: orders.Created, To: orders.Refunded, At: at},
	} {
		if _, err := tr.ApplyAndGet(ctx, d.Gorm); !errors.Is(err, orders.ErrIllegalTransition) {
			t.Errorf("%s: %v, want ErrIllegalTransition", name, err)
		}
	}
	if g := get(other.OrderNo); !reflect.DeepEqual(g, other) {
		t.Errorf("refused transitions changed %+v to %+v", other, g)
	}

	// A transaction whose snapshot predates another's committed change of
	// the row: the UPDATE acts on the latest row, and the plain read after
	// it returns that row, not the snapshot.
	third := create("aag-3")
	err = d.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := orders.Get(ctx, tx, "acme", third.OrderNo); err != nil { // takes the snapshot
			return err
		}
		if err := d.Gorm.WithContext(ctx).Exec(`UPDATE orders SET description = 'changed' WHERE order_no = ?`, third.OrderNo).Error; err != nil {
			return err
		}
		if snap, err := orders.Get(ctx, tx, "acme", third.OrderNo); err != nil || snap.Description != "d" {
			t.Errorf("snapshot read %+v, %v: want the description before the change (the test's premise)", snap, err)
		}
		got, err := paid(third.OrderNo, 1999).ApplyAndGet(ctx, tx)
		if err != nil {
			return err
		}
		if got.Description != "changed" || got.Status != orders.Paid {
			t.Errorf("read back %+v, want the committed description and PAID", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
