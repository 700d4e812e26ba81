package mockpay

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/client"
)

// LostConfig is the lost-callbacks phase of the tour: orders paid at the
// provider whose payment.succeeded callback is dropped (DropRate of them),
// recovered by paysvc's sweep through the status query (README.md, "Calls to
// providers"); the dropped callbacks are then delivered late and must replay.
type LostConfig struct {
	BaseURL, APIKey string
	API             *API
	Sender          *Sender
	// Orders are created; half are paid at the provider, DropRate of those
	// without a callback; the other half are never paid and expire.
	Orders   int
	DropRate float64
	// Wait is how long to wait after creating them: past PAYSVC_ORDER_TTL.
	Wait time.Duration
	// Sweep runs one pass of paysvc's sweep (app.App.Sweep), or waits for
	// the service's own sweep to settle the orders given (those of the
	// phase that no callback paid), and counts the orders it closed and
	// recovered.
	Sweep func(ctx context.Context, orders []string) (closed, recovered int, err error)
}

// LostReport is what the phase saw.
type LostReport struct {
	Orders, Paid, Dropped, Closed, Recovered, LateReplayed int
	Anomalies                                              []string
}

// RunLost runs the phase.
func RunLost(ctx context.Context, c LostConfig) (LostReport, error) {
	m := client.New(c.BaseURL, c.APIKey, client.WithAttemptTimeout(DefaultTimeout))
	rep := LostReport{Orders: c.Orders}
	paid := c.Orders / 2
	drop := int(math.Round(c.DropRate * float64(paid)))
	var (
		dropped []Event
		unpaid  []string // by any callback: the sweep's
	)
	for i := range c.Orders {
		run := NewTxnID()
		o, err := m.CreateOrder(ctx, client.CreateOrderRequest{MerchantOrderNo: "lost-" + run, Amount: 1000 + int64(i), Currency: "EUR",
			Description: "mockpay scenario"}, client.WithIdempotencyKey("lost-"+run))
		if err != nil {
			return rep, fmt.Errorf("create order: %w", err)
		}
		if i >= paid {
			unpaid = append(unpaid, o.OrderNo)
			continue
		}
		rep.Paid++
		ev := PaymentSucceeded(o.OrderNo, NewTxnID(), o.Amount, o.Currency)
		c.API.RecordEvent(ev)
		if i < drop {
			unpaid = append(unpaid, o.OrderNo)
			rep.Dropped++
			dropped = append(dropped, ev)
			continue
		}
		if _, _, err := c.Sender.SendOne(ctx, ev); err != nil {
			return rep, err
		}
	}
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(c.Wait):
	}
	var err error
	if rep.Closed, rep.Recovered, err = c.Sweep(ctx, unpaid); err != nil {
		return rep, err
	}
	if rep.Recovered != rep.Dropped || rep.Closed != c.Orders-paid {
		rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("sweep closed %d and recovered %d, want %d and %d",
			rep.Closed, rep.Recovered, c.Orders-paid, rep.Dropped))
	}
	for _, ev := range dropped {
		resp, err := c.Sender.DeliverResponse(ctx, c.Sender.NewDelivery(ev))
		if err != nil {
			return rep, err
		}
		if resp.Status == http.StatusOK && resp.Replayed {
			rep.LateReplayed++
		} else {
			rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("late callback of %v answered %d (replayed %t)", ev.Data["order_no"], resp.Status, resp.Replayed))
		}
	}
	return rep, nil
}
