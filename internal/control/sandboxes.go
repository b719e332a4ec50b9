package control

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Every {id} of a sandbox takes its id or its name (unique per account
// among sandboxes not destroyed); an id always wins. Snapshots are found by
// name only where the call names their sandbox too.

// own loads the caller's sandbox ref (an id or a name); another account's
// sandbox is indistinguishable from none.
func (c *Control) own(ctx context.Context, who Caller, ref string) (*store.SandboxRecord, error) {
	acct := who.Account.ID
	if sandbox.IsID(sandbox.PrefixSandbox, ref) {
		r, err := c.store.GetSandbox(ctx, ref)
		if err != nil {
			return nil, storeErr(err)
		}
		if r.AccountID != acct {
			return nil, fmt.Errorf("sandbox %s not found: %w", ref, errdefs.ErrNotFound)
		}
		return r, nil
	}
	if sandbox.CheckName(ref) != nil {
		return nil, fmt.Errorf("%q is neither a sandbox id (sbx_ and 20 characters) nor a sandbox name: %w", ref, errdefs.ErrInvalidArgument)
	}
	r, err := c.store.SandboxByName(ctx, acct, ref)
	return r, storeErr(err)
}

// Sandbox is the caller's sandbox ref.
func (c *Control) Sandbox(ctx context.Context, who Caller, ref string) (sandbox.Sandbox, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// ListFilter selects the sandboxes of List.
type ListFilter struct {
	States           []sandbox.State // any of these; none: every live state
	IncludeDestroyed bool
	Limit            int    // a page of at most this many (1..api.MaxListLimit); 0: all
	After            string // the page after this sandbox id (a NextAfter)
}

// List lists the caller's sandboxes, oldest first, a page at a time when
// f.Limit is set.
func (c *Control) List(ctx context.Context, who Caller, f ListFilter) (api.SandboxList, error) {
	for _, st := range f.States {
		if !st.Valid() {
			return api.SandboxList{}, invalid("state %q is not a sandbox state", st)
		}
	}
	if f.Limit < 0 || f.Limit > api.MaxListLimit {
		return api.SandboxList{}, invalid("limit=%d: want 1..%d", f.Limit, api.MaxListLimit)
	}
	if f.After != "" {
		if err := sandbox.CheckID(sandbox.PrefixSandbox, f.After); err != nil {
			return api.SandboxList{}, invalid("after=%q: want a sandbox id (a next_after)", f.After)
		}
	}
	rows, err := c.store.ListSandboxes(ctx, store.SandboxFilter{AccountID: who.Account.ID, States: f.States,
		IncludeDestroyed: f.IncludeDestroyed, Limit: f.Limit, After: f.After})
	if err != nil {
		return api.SandboxList{}, err
	}
	out := api.SandboxList{Sandboxes: c.views(rows)}
	if f.Limit > 0 && len(rows) == f.Limit {
		out.NextAfter = rows[len(rows)-1].ID
	}
	return out, nil
}

// Delete destroys the caller's sandbox ref and its snapshots (in the
// background; the record says deleting until it is destroyed).
func (c *Control) Delete(ctx context.Context, who Caller, ref string) (sandbox.Sandbox, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if r, err = c.node.Delete(ctx, r.ID); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// Wait blocks until the caller's sandbox ref settles, or reaches
// req.State, for req.TimeoutSeconds (default 120, at most 600).
func (c *Control) Wait(ctx context.Context, who Caller, ref string, req api.WaitRequest) (sandbox.Sandbox, error) {
	if req.State != "" && !req.State.Valid() {
		return sandbox.Sandbox{}, invalid("state %q is not a sandbox state", req.State)
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > 600 {
		return sandbox.Sandbox{}, invalid("timeout_seconds must be within 0..600")
	}
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	wait := time.Duration(req.TimeoutSeconds) * time.Second
	if wait == 0 {
		wait = 120 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if r, err = c.node.Wait(ctx, r.ID, req.State); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// Changed is closed at sandbox id's next change (for a feed of its
// states).
func (c *Control) Changed(id string) <-chan struct{} { return c.node.Changed(id) }

// Lifecycle carries out op (start, stop, pause or resume) on the caller's
// sandbox ref (docs/quotas.md). Ops that run the sandbox again (start,
// resume) need budget left and a running slot; a paused sandbox holds its
// slot already, so a resume needs exactly that one.
func (c *Control) Lifecycle(ctx context.Context, who Caller, op sandbox.Op, ref string) (sandbox.Sandbox, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if r, err = c.lifecycle(ctx, op, r); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

func (c *Control) lifecycle(ctx context.Context, op sandbox.Op, r *store.SandboxRecord) (*store.SandboxRecord, error) {
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
		if err := c.checkBudget(r); err != nil {
			return nil, err
		}
		done, err := c.quotas.admit(ctx, r.AccountID, []string{r.ID}, false, r.ID)
		if err != nil {
			return nil, err
		}
		defer done(1)
	}
	return call(ctx, r.ID)
}

// checkBudget refuses to run a sandbox again once its budget is spent
// (docs/quotas.md: max_cost_micros).
func (c *Control) checkBudget(r *store.SandboxRecord) error {
	if r.MaxCostMicros > 0 && c.cost != nil {
		if cost := c.cost(r, time.Now()); cost >= r.MaxCostMicros {
			return fmt.Errorf("sandbox %s cost %d of its max_cost_micros %d: %w", r.ID, cost, r.MaxCostMicros, errdefs.ErrBudgetExhausted)
		}
	}
	return nil
}

// Wake runs the caller's sandbox ref again, whatever holds it: a paused
// one is resumed, a stopped (or stopping) one started, a starting one
// waited for; a running one is left as it is. It returns the sandbox once
// it settled and whether it had to be woken. The lifecycle table says
// which op applies.
func (c *Control) Wake(ctx context.Context, who Caller, ref string) (sandbox.Sandbox, bool, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, false, err
	}
	wait := func(want sandbox.State) error {
		ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		defer cancel()
		r, err = c.node.Wait(ctx, r.ID, want)
		return err
	}
	woken := false
	if !r.State.Settled() {
		// Let what is under way finish: a stop before a start, a start before
		// the sandbox runs.
		if err := wait(""); err != nil {
			return c.view(r), false, err
		}
	}
	for _, op := range []sandbox.Op{sandbox.OpResume, sandbox.OpStart} {
		if !sandbox.Allows(r.State, op) {
			continue
		}
		if r, err = c.lifecycle(ctx, op, r); err != nil {
			return sandbox.Sandbox{}, false, err
		}
		woken = true
		sb, err := c.Settled(ctx, c.view(r))
		return sb, woken, err
	}
	return c.view(r), woken, nil
}

// Peek reads sandbox id whoever's it is: for a front end that decides
// from a sandbox's state before any caller is known (E2B's auto-resume by
// traffic, which then checks the request's token or the sandbox's public
// ports). It hands out nothing a token does not.
func (c *Control) Peek(ctx context.Context, id string) (sandbox.Sandbox, error) {
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil {
		return sandbox.Sandbox{}, storeErr(err)
	}
	return c.view(r), nil
}

// ResumeForOwner resumes paused sandbox id as its owner's own resume would
// (a running slot and budget left), waits until it runs and gives it
// timeoutSeconds from then: E2B's auto-resume, for traffic that reached
// the sandbox with its owner's token.
func (c *Control) ResumeForOwner(ctx context.Context, id string, timeoutSeconds int) error {
	at, _, err := resolveTimeout(timeoutSeconds, "", time.Now())
	if err != nil {
		return err
	}
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil {
		return storeErr(err)
	}
	if r, err = c.lifecycle(ctx, sandbox.OpResume, r); err != nil {
		return err
	}
	if r, err = c.node.Wait(ctx, r.ID, ""); err != nil {
		return err
	}
	if !r.State.Configured() { // not running: the resume failed
		return fmt.Errorf("sandbox %s is %s after resuming: %s: %w", id, r.State, r.ErrorMessage, errdefs.ErrUnavailable)
	}
	_, err = c.store.UpdateSandbox(ctx, id, func(x *store.SandboxRecord) error {
		if _, err := sandbox.NextFor(x.ID, x.State, sandbox.OpSetTimeout); err != nil {
			return err
		}
		x.TimeoutAt = at
		return nil
	})
	return err
}

// SetTimeout moves the deadline of the caller's sandbox ref:
// req.TimeoutSeconds from now, or none (0); req.OnTimeout, when given, is
// what then happens.
func (c *Control) SetTimeout(ctx context.Context, who Caller, ref string, req api.TimeoutRequest) (sandbox.Sandbox, error) {
	at, action, err := resolveTimeout(req.TimeoutSeconds, req.OnTimeout, time.Now())
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	r, err = c.store.UpdateSandbox(ctx, r.ID, func(x *store.SandboxRecord) error {
		if _, err := sandbox.NextFor(x.ID, x.State, sandbox.OpSetTimeout); err != nil {
			return err
		}
		x.TimeoutAt = at
		if action != "" {
			x.OnTimeout = action
		}
		if x.TimeoutAt != nil && x.OnTimeout == "" {
			x.OnTimeout = sandbox.OnTimeoutDelete
		}
		return nil
	})
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// SetNetwork applies a live change to the network policy of the caller's
// sandbox ref, validated whole (sandbox.NetworkChange) before the node
// changes anything.
func (c *Control) SetNetwork(ctx context.Context, who Caller, ref string, req api.NetworkPolicyRequest) (sandbox.Sandbox, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	ch := sandbox.NetworkChange{Egress: req.Egress, Allow: req.Allow, Deny: req.Deny, RateBytes: req.RateBytes, RatePackets: req.RatePackets}
	next, err := ch.Apply(r.Network)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	if r, err = c.node.SetNetwork(ctx, r.ID, next); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// SetPort opens a guest port of the caller's sandbox ref to requests
// without a token, or closes it.
func (c *Control) SetPort(ctx context.Context, who Caller, ref string, req api.PortRequest) (sandbox.Sandbox, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if req.Port < 1 || req.Port > 65535 {
		return sandbox.Sandbox{}, fmt.Errorf("port %d: want 1..65535: %w", req.Port, errdefs.ErrInvalidArgument)
	}
	if r, err = c.node.SetPortPublic(ctx, r.ID, req.Port, req.Public); err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(r), nil
}

// Lineage is the caller's sandbox ref with its ancestors (parent first)
// and descendants (children before grandchildren), destroyed ones
// included.
func (c *Control) Lineage(ctx context.Context, who Caller, ref string) (api.Lineage, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return api.Lineage{}, err
	}
	all, err := c.store.ListSandboxes(ctx, store.SandboxFilter{AccountID: r.AccountID, IncludeDestroyed: true})
	if err != nil {
		return api.Lineage{}, err
	}
	byID := map[string]*store.SandboxRecord{}
	children := map[string][]*store.SandboxRecord{}
	for _, x := range all {
		byID[x.ID] = x
		if x.ParentID != "" {
			children[x.ParentID] = append(children[x.ParentID], x)
		}
	}
	entry := func(x *store.SandboxRecord) api.LineageEntry {
		return api.LineageEntry{ID: x.ID, Name: x.Name, State: x.State, ParentID: x.ParentID, CreatedAt: x.CreatedAt}
	}
	out := api.Lineage{Sandbox: entry(r), Ancestors: []api.LineageEntry{}, Descendants: []api.LineageEntry{}}
	for p := byID[r.ParentID]; p != nil; p = byID[p.ParentID] {
		out.Ancestors = append(out.Ancestors, entry(p))
	}
	queue := children[r.ID]
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		out.Descendants = append(out.Descendants, entry(x))
		queue = append(queue, children[x.ID]...)
	}
	return out, nil
}
