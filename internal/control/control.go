// Package control is the control plane between the API and the nodes: the
// policy on an account's requests (running slots, the create rate and
// daily cap, budgets, a fork's fan-out, snapshot names) before a node
// carries them out. HTTP handlers decode a request, call one method here
// and encode its answer; the lifecycle's rules are sandbox's.
package control

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Options configure a Control.
type Options struct {
	Store store.Store
	Node  Node
	Plan  Plan // zero: DefaultPlan
	// Cost is what a sandbox has cost so far at now, in micro-dollars (the
	// metering of the API's prices); nil: budgets are not enforced.
	Cost   func(r *store.SandboxRecord, now time.Time) int64
	Logger *slog.Logger
	// Replica names this control-plane process among those sharing the
	// store (leases are held in its name); "": host name and process id.
	Replica string
}

// Control applies the account's policy and hands the work to the node.
type Control struct {
	store   store.Store
	node    Node
	quotas  *quotas
	cost    func(*store.SandboxRecord, time.Time) int64
	log     *slog.Logger
	replica string
}

// New makes a Control.
func New(o Options) *Control {
	if o.Plan == (Plan{}) {
		o.Plan = DefaultPlan
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	q := newQuotas(o.Plan, o.Store)
	q.log = o.Logger
	return &Control{store: o.Store, node: o.Node, quotas: q, cost: o.Cost, log: o.Logger, replica: o.Replica}
}

// Plan is every account's quota.
func (c *Control) Plan() Plan { return c.quotas.plan }

// Node is the node the control plane runs sandboxes on.
func (c *Control) Node() Node { return c.node }

// Create admits one create (a running slot, the rate, the daily cap) and
// has the node make r, validated at the edge.
func (c *Control) Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	if err := c.namesFree(ctx, r.AccountID, []*store.SandboxRecord{r}); err != nil {
		return nil, err
	}
	done, err := c.quotas.admit(ctx, r.AccountID, 1, true, "")
	if err != nil {
		return nil, err
	}
	made, err := c.node.Create(ctx, r)
	if err != nil {
		done(0)
		return nil, err
	}
	done(1)
	return made, nil
}

// Clone forks parent into children (named and with their overrides, see
// sandbox.ChildNames and sandbox.Inherit). SPEC, fork rule 5: a fork of N
// is N creates and N running slots, all or none.
func (c *Control) Clone(ctx context.Context, parent *store.SandboxRecord, children []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	return c.CloneWith(ctx, parent, children, "")
}

// PlacingNode is a Node that places a fork's children on other hosts
// when the parent's has no room (a cluster's router with an image store).
type PlacingNode interface {
	CloneAny(ctx context.Context, parentID string, children []*store.SandboxRecord, placement string) (time.Duration, []*store.SandboxRecord, error)
}

// CloneWith is Clone with a placement of the children ("" or "parent":
// the parent's node; "any": other nodes for those that do not fit there,
// where the node can place them; one host has only its own).
func (c *Control) CloneWith(ctx context.Context, parent *store.SandboxRecord, children []*store.SandboxRecord, placement string) (time.Duration, []*store.SandboxRecord, error) {
	switch placement {
	case "", api.PlacementParent, api.PlacementAny:
	default:
		return 0, nil, fmt.Errorf("placement %q: want %q or %q: %w", placement, api.PlacementParent, api.PlacementAny, errdefs.ErrInvalidArgument)
	}
	if err := c.namesFree(ctx, parent.AccountID, children); err != nil {
		return 0, nil, err
	}
	done, err := c.quotas.admit(ctx, parent.AccountID, len(children), true, "")
	if err != nil {
		return 0, nil, err
	}
	var (
		pause time.Duration
		made  []*store.SandboxRecord
	)
	if pn, ok := c.node.(PlacingNode); ok && placement == api.PlacementAny {
		pause, made, err = pn.CloneAny(ctx, parent.ID, children, placement)
	} else {
		pause, made, err = c.node.Clone(ctx, parent.ID, children)
	}
	done(len(made))
	return pause, made, err
}

// CloneSnapshot starts children from snapshot snapID of parent, admitted
// like a clone's.
func (c *Control) CloneSnapshot(ctx context.Context, parent *store.SandboxRecord, snapID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	if err := c.namesFree(ctx, parent.AccountID, children); err != nil {
		return nil, err
	}
	done, err := c.quotas.admit(ctx, parent.AccountID, len(children), true, "")
	if err != nil {
		return nil, err
	}
	made, err := c.node.CloneSnapshot(ctx, snapID, children)
	done(len(made))
	return made, err
}

// Lifecycle carries out op (start, stop, pause or resume) on r. Ops that
// run the sandbox again (start, resume) need budget left and a running
// slot; a paused sandbox holds its slot already, so a resume needs exactly
// that one.
func (c *Control) Lifecycle(ctx context.Context, op sandbox.Op, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	var call func(context.Context, string) (*store.SandboxRecord, error)
	runs := false
	switch op {
	case sandbox.OpStart:
		call, runs = c.node.Start, true
	case sandbox.OpResume:
		call, runs = c.node.Resume, true
	case sandbox.OpStop:
		call = c.node.Stop
	case sandbox.OpPause:
		call = c.node.Pause
	default:
		return nil, fmt.Errorf("%s is not a lifecycle call: %w", op, errdefs.ErrInternal)
	}
	if runs {
		if err := c.CheckBudget(r); err != nil {
			return nil, err
		}
		done, err := c.quotas.admit(ctx, r.AccountID, 1, false, r.ID)
		if err != nil {
			return nil, err
		}
		defer done(1)
	}
	return call(ctx, r.ID)
}

// CheckBudget refuses to run a sandbox again once its budget is spent
// (SPEC, Quotas: max_cost_micros).
func (c *Control) CheckBudget(r *store.SandboxRecord) error {
	if r.MaxCostMicros > 0 && c.cost != nil {
		if cost := c.cost(r, time.Now()); cost >= r.MaxCostMicros {
			return fmt.Errorf("sandbox %s cost %d of its max_cost_micros %d: %w", r.ID, cost, r.MaxCostMicros, errdefs.ErrBudgetExhausted)
		}
	}
	return nil
}

// Snapshot saves r's disk and memory under name (checked at the edge with
// sandbox.CheckSnapshotName; empty: the node picks the default name); the
// node checks it is unique and the limit
// (sandbox.CheckNewSnapshot) before it pauses anything.
func (c *Control) Snapshot(ctx context.Context, r *store.SandboxRecord, name string) (*store.SnapshotRecord, error) {
	return c.node.CreateSnapshot(ctx, r.ID, name)
}
