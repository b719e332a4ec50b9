package control

import (
	"context"
	"fmt"
	"slices"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The data plane: calls made with a data-plane token (exec, files,
// terminals, desktop, ports, the browser). The token names one sandbox and
// the API key that asked for it; every call checks both.

// Target is a sandbox a data-plane call was let through to.
type Target struct {
	sandbox.Sandbox
	rec *store.SandboxRecord
}

// Call is an open data-plane call: its sandbox, the sandbox's agent, and
// Release, which frees the call's slot (Options.Calls: what a sandbox and
// an account may hold at once).
type Call struct {
	Target
	Agent   *guest.Client
	Release func()
}

// tokenSandbox checks a data-plane token for sandbox id and reads the
// sandbox: nil when there is none any more, or it is another account's
// than the token's. A store that does not answer is not a bad token
// (unavailable).
func (c *Control) tokenSandbox(ctx context.Context, token, id string) (*store.SandboxRecord, error) {
	if err := sandbox.CheckID(sandbox.PrefixSandbox, id); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("missing data-plane token (Authorization: Bearer, or ?token= for the browser): %w", errdefs.ErrUnauthenticated)
	}
	acct, err := c.checkToken(ctx, token, id)
	if err != nil {
		return nil, err
	}
	r, err := c.store.GetSandbox(ctx, id)
	if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, storeErr(err)
	}
	if err != nil || r.AccountID != acct {
		return nil, nil
	}
	return r, nil
}

// tokenTarget checks a data-plane token for sandbox id: a sandbox that is
// gone makes the token worthless (unauthenticated).
func (c *Control) tokenTarget(ctx context.Context, token, id string) (Target, error) {
	r, err := c.tokenSandbox(ctx, token, id)
	if err != nil {
		return Target{}, err
	}
	if r == nil || r.State.Deleted() {
		return Target{}, fmt.Errorf("the sandbox of this token no longer exists: %w", errdefs.ErrUnauthenticated)
	}
	return Target{Sandbox: r.Sandbox, rec: r}, nil
}

// Open opens a data-plane call on sandbox id with token: the token
// checked, a slot of the sandbox's calls taken, its agent reached.
func (c *Control) Open(ctx context.Context, token, id string) (Call, error) {
	t, err := c.tokenTarget(ctx, token, id)
	if err != nil {
		return Call{}, err
	}
	release, err := c.calls.acquire(id, t.AccountID)
	if err != nil {
		return Call{}, err
	}
	agent, err := c.node.Agent(ctx, t.rec)
	if err != nil {
		release()
		return Call{}, err
	}
	return Call{Target: t, Agent: agent, Release: release}, nil
}

// OpenEnvd is Open as E2B's envd answers: a sandbox that is gone, not the
// token's account's or not running is unavailable (E2B's SDK reads that
// as "not running"), not a bad token. Its calls take a slot as Open's do
// (release it when the call ends); no room is too_many_requests or
// account_calls_full.
func (c *Control) OpenEnvd(ctx context.Context, token, id string) (*guest.Client, func(), error) {
	r, err := c.tokenSandbox(ctx, token, id)
	if err != nil {
		return nil, nil, err
	}
	if r == nil {
		return nil, nil, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrUnavailable)
	}
	if !sandbox.Allows(r.State, sandbox.OpAccess) {
		return nil, nil, fmt.Errorf("sandbox %s is %s, not running: %w", id, r.State, errdefs.ErrUnavailable)
	}
	release, err := c.calls.acquire(r.ID, r.AccountID)
	if err != nil {
		return nil, nil, err
	}
	agent, err := c.node.Agent(ctx, r)
	if err != nil {
		release()
		return nil, nil, err
	}
	return agent, release, nil
}

// Hold takes a slot of the data plane's budget for a request to a guest
// port of t, a TCP forward to one, or its browser's DevTools (release it
// when it ends): it counts against t's sandbox and its owner's account,
// whoever sent it (a public port's traffic holds the owner's guest).
func (c *Control) Hold(t Target) (func(), error) { return c.calls.acquire(t.ID, t.AccountID) }

// PortAccess lets a request through to guest port port of sandbox id: with
// its data-plane token (token, "" when it came without one), or without
// one when the owner opened the port to the public. withToken says whether
// a token was checked (it must then be kept from the guest).
func (c *Control) PortAccess(ctx context.Context, token, id string, port int) (t Target, withToken bool, err error) {
	if err := sandbox.CheckID(sandbox.PrefixSandbox, id); err != nil {
		return Target{}, false, err
	}
	if token == "" {
		r, err := c.store.GetSandbox(ctx, id)
		if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			return Target{}, false, storeErr(err) // an outage is not a bad token
		}
		// A token is not needed on a public port; one that is sent is
		// checked (and then kept from the guest) like on a private port.
		if err == nil && !r.State.Deleted() && slices.Contains(r.PublicPorts, port) {
			return Target{Sandbox: r.Sandbox, rec: r}, false, nil
		}
	}
	t, err = c.tokenTarget(ctx, token, id)
	return t, err == nil, err
}

// PortAddr is the host:port a guest port of t is reached at.
func (c *Control) PortAddr(t Target, port int) (string, error) { return c.node.PortAddr(t.rec, port) }

// BrowserAccess lets a data-plane request through to the browser of
// sandbox id (CDP clients may send the token in the query).
func (c *Control) BrowserAccess(ctx context.Context, token, id string) (Target, error) {
	t, err := c.tokenTarget(ctx, token, id)
	if err != nil {
		return Target{}, err
	}
	if !t.Browser {
		return Target{}, noBrowser(t.ID)
	}
	return t, nil
}

func noBrowser(id string) error {
	return invalid("sandbox %s has no browser: create it, or fork it, with browser: true", id)
}

// CheckDesktop refuses a desktop call on a sandbox without one.
func CheckDesktop(sb sandbox.Sandbox) error {
	if !sb.Desktop {
		return fmt.Errorf("sandbox %s has no desktop (create or fork it with desktop: true): %w", sb.ID, errdefs.ErrDesktopNotEnabled)
	}
	return nil
}

// agent is the agent of the caller's sandbox r, for a control-plane call
// that reads the guest, with a slot of its calls.
func (c *Control) agent(ctx context.Context, r *store.SandboxRecord) (*guest.Client, func(), error) {
	agent, err := c.node.Agent(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	release, err := c.calls.acquire(r.ID, r.AccountID)
	if err != nil {
		return nil, nil, err
	}
	return agent, release, nil
}
