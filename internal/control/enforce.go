package control

import (
	"context"
	"errors"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The state_reason of a sandbox stopped by the control plane.
const (
	// BudgetReason: its cost reached max_cost_micros (docs/quotas.md, Budgets).
	BudgetReason = "budget_exhausted"
	// TimeoutReason: its time was up (paused or stopped).
	TimeoutReason = "timeout"
)

// EnforceLease is the store lease (store.Quotas.TryLease) under which one
// replica at a time enforces budgets and timeouts.
const EnforceLease = "enforce"

// Enforce stops every sandbox whose cost reached its max_cost_micros and
// carries out every timeout that passed, every interval, until ctx ends —
// on one replica at a time: the one holding EnforceLease, which lapses
// after three intervals without renewal (a replica that died hands over).
func (c *Control) Enforce(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	held := false
	defer func() {
		if held {
			c.store.ReleaseLease(context.WithoutCancel(ctx), EnforceLease, c.replica)
		}
	}()
	for {
		ok := c.enforceOnce(ctx, time.Now(), 3*every)
		if ok != held {
			c.log.Info("enforce: lease", "held", ok, "replica", c.replica)
			held = ok
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enforceOnce takes or renews EnforceLease for ttl and, holding it, stops
// what is over budget and acts on passed timeouts; it says whether it held
// the lease.
func (c *Control) enforceOnce(ctx context.Context, now time.Time, ttl time.Duration) bool {
	ok, err := c.store.TryLease(ctx, EnforceLease, c.replica, now, ttl)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("enforce: lease", "err", err)
		}
		return false
	}
	if ok {
		c.EnforceBudgets(ctx, now)
		c.EnforceTimeouts(ctx, now)
	}
	return ok
}

// EnforceBudgets stops, with reason BudgetReason, every sandbox a stop
// applies to whose cost at now reached its max_cost_micros.
func (c *Control) EnforceBudgets(ctx context.Context, now time.Time) {
	if c.cost == nil {
		return
	}
	rows, err := c.store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.Needs(sandbox.OpStop)})
	if err != nil {
		c.log.Warn("budgets: list sandboxes", "err", err)
		return
	}
	for _, r := range rows {
		if r.MaxCostMicros <= 0 {
			continue
		}
		cost := c.cost(r, now)
		if cost < r.MaxCostMicros {
			continue
		}
		c.log.Info("budget exhausted: stopping", "sandbox", r.ID, "cost_micros", cost, "max_cost_micros", r.MaxCostMicros)
		if _, err := c.node.StopReason(ctx, r.ID, BudgetReason); err != nil {
			c.log.Warn("budgets: stop", "sandbox", r.ID, "err", err)
		}
	}
}

// EnforceTimeouts carries out the action of every sandbox whose deadline
// passed by now. Pause and stop clear the deadline, so a sandbox resumed
// later runs until a client sets a new one.
func (c *Control) EnforceTimeouts(ctx context.Context, now time.Time) {
	rows, err := c.store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.TimeoutStates})
	if err != nil {
		c.log.Warn("timeouts: list sandboxes", "err", err)
		return
	}
	for _, r := range rows {
		if r.TimeoutAt == nil || now.Before(*r.TimeoutAt) {
			continue
		}
		c.log.Info("sandbox timed out", "sandbox", r.ID, "on_timeout", r.OnTimeout, "state", r.State)
		if err := c.expire(ctx, r); err != nil && !errors.Is(err, errdefs.ErrInvalidState) {
			c.log.Warn("timeouts: act", "sandbox", r.ID, "err", err)
		}
	}
}

func (c *Control) expire(ctx context.Context, r *store.SandboxRecord) error {
	var err error
	switch r.OnTimeout {
	case sandbox.OnTimeoutPause:
		if sandbox.Allows(r.State, sandbox.OpPause) {
			_, err = c.node.Pause(ctx, r.ID)
		}
	case sandbox.OnTimeoutStop:
		if sandbox.Allows(r.State, sandbox.OpStop) {
			_, err = c.node.StopReason(ctx, r.ID, TimeoutReason)
		}
	default:
		_, err = c.node.Delete(ctx, r.ID)
		return err
	}
	if err != nil {
		return err
	}
	_, err = c.store.UpdateSandbox(ctx, r.ID, func(x *store.SandboxRecord) error {
		// A client may have moved the deadline meanwhile: keep theirs.
		if x.TimeoutAt != nil && x.TimeoutAt.Equal(*r.TimeoutAt) {
			x.TimeoutAt = nil
		}
		return nil
	})
	return err
}
