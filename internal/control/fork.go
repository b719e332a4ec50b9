package control

import (
	"context"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Clone forks the caller's sandbox ref into req.Count children
// (docs/fork.md): named, inheriting what the parent has but for the fields
// the call overrides, the browser or desktop it turns on checked against
// the parent's template, with the network the call gives. A fork of N is N
// creates and N running slots, all or none, before the parent pauses.
func (c *Control) Clone(ctx context.Context, who Caller, ref string, req api.CloneRequest) (api.CloneResponse, error) {
	parent, children, err := c.forkChildren(ctx, who, ref, req)
	if err != nil {
		return api.CloneResponse{}, err
	}
	pause, made, err := c.clone(ctx, parent, children, req.Placement)
	if err != nil {
		return api.CloneResponse{}, err
	}
	if c.metrics != nil {
		c.metrics.ForkPause.Observe(pause.Seconds())
	}
	return c.cloned(pause, made), nil
}

// CloneSnapshot starts children from snapshot snapRef of the caller's
// sandbox ref: fork children of the sandbox as it was then, the sandbox
// itself untouched. They are made like a clone's.
func (c *Control) CloneSnapshot(ctx context.Context, who Caller, ref, snapRef string, req api.CloneRequest) (api.CloneResponse, error) {
	parent, children, err := c.forkChildren(ctx, who, ref, req)
	if err != nil {
		return api.CloneResponse{}, err
	}
	snap, err := c.snapshotOf(ctx, parent, snapRef)
	if err != nil {
		return api.CloneResponse{}, err
	}
	if err := c.namesFree(ctx, parent.AccountID, children); err != nil {
		return api.CloneResponse{}, err
	}
	done, err := c.quotas.admit(ctx, parent.AccountID, childIDs(children), true, "")
	if err != nil {
		return api.CloneResponse{}, err
	}
	made, err := c.node.CloneSnapshot(ctx, snap.ID, children)
	done(len(made))
	if err != nil {
		return api.CloneResponse{}, err
	}
	return c.cloned(0, made), nil
}

// PlacingNode is a Node that places a fork's children on other hosts
// when the parent's has no room (a cluster's router with an image store).
type PlacingNode interface {
	CloneAny(ctx context.Context, parentID string, children []*store.SandboxRecord, placement string) (time.Duration, []*store.SandboxRecord, error)
}

// clone admits the children (free names, running slots, rate tokens and
// the daily cap for all of them) before the node captures the parent; the
// rate tokens of children the node did not make are given back. placement
// ("" or "parent": the parent's node; "any": other nodes for those that do
// not fit there, where the node can place them; one host has only its own)
// says where they go.
func (c *Control) clone(ctx context.Context, parent *store.SandboxRecord, children []*store.SandboxRecord, placement string) (time.Duration, []*store.SandboxRecord, error) {
	switch placement {
	case "", api.PlacementParent, api.PlacementAny:
	default:
		return 0, nil, invalid("placement %q: want %q or %q", placement, api.PlacementParent, api.PlacementAny)
	}
	if err := c.namesFree(ctx, parent.AccountID, children); err != nil {
		return 0, nil, err
	}
	done, err := c.quotas.admit(ctx, parent.AccountID, childIDs(children), true, "")
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

func (c *Control) cloned(pause time.Duration, made []*store.SandboxRecord) api.CloneResponse {
	return api.CloneResponse{PauseMS: pause.Milliseconds(), Sandboxes: c.views(made)}
}

// forkChildren validates a clone request into the parent and its
// children's records, each named (sandbox.ChildNames) and filled in from
// the parent (sandbox.Inherit) with the call's overrides.
func (c *Control) forkChildren(ctx context.Context, who Caller, ref string, req api.CloneRequest) (*store.SandboxRecord, []*store.SandboxRecord, error) {
	if req.MaxCostMicros != nil && *req.MaxCostMicros < 0 {
		return nil, nil, invalid("max_cost_micros must not be negative")
	}
	names, err := sandbox.ChildNames(req.Name, req.Count)
	if err != nil {
		return nil, nil, err
	}
	parent, err := c.own(ctx, who, ref)
	if err != nil {
		return nil, nil, err
	}
	overrides, err := sandbox.ForkGit(parent.Sandbox, sandbox.ForkOverrides{GitBranch: req.GitBranch, PRNumber: req.PRNumber,
		MaxCostMicros: req.MaxCostMicros, Browser: req.Browser, Desktop: req.Desktop})
	if err != nil {
		return nil, nil, err
	}
	children := make([]*store.SandboxRecord, 0, len(names))
	for _, name := range names {
		// The id now: the quota hold names it (the node keeps it).
		child := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: name}}
		sandbox.Inherit(&child.Sandbox, parent.Sandbox, overrides)
		children = append(children, child)
	}
	if err := c.forkFeatures(ctx, who, parent.Sandbox, children[0].Sandbox); err != nil {
		return nil, nil, err
	}
	netw, err := networkOf(req.Network)
	if err != nil {
		return nil, nil, err
	}
	if netw != nil {
		for _, child := range children {
			p := *netw
			child.Network = &p
		}
	}
	return parent, children, nil
}

// forkFeatures refuses children that switch on a browser or desktop their
// template does not carry. Only what the fork turns on is checked: what the
// parent already has it keeps.
func (c *Control) forkFeatures(ctx context.Context, who Caller, parent, child sandbox.Sandbox) error {
	want := sandbox.WantedFeatures(child.Browser && !parent.Browser, child.Desktop && !parent.Desktop)
	if len(want) == 0 {
		return nil
	}
	tpl, err := c.catalog.FeaturesOf(ctx, parent.Template)
	if err != nil {
		return err
	}
	return c.catalog.RequireFeatures(ctx, who.Account.ID, tpl, want)
}

// childIDs are the ids of children, for their quota hold.
func childIDs(children []*store.SandboxRecord) []string {
	ids := make([]string, len(children))
	for i, c := range children {
		ids[i] = c.ID
	}
	return ids
}
