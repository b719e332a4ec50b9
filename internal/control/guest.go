package control

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/guestports"
	"github.com/zeish/zeish/internal/guestread"
	"github.com/zeish/zeish/sandbox"
)

// Control-plane calls that read a sandbox's guest: its listening ports,
// its git clone, its desktop, its browser. Only the node that runs the VM
// reaches the guest's agent: guestread.Local on this host, or the
// cluster's Router, whose calls of the node protocol run them there.

// guests reads sandboxes' guests: on this host, or on each sandbox's node.
func (c *Control) guests() guestread.Reads {
	if g, ok := c.node.(guestread.Reads); ok {
		return g
	}
	return guestread.Local{Node: c.node}
}

// Ports are the caller's sandbox ref and the TCP ports its guest listens
// on (read from the guest kernel's tables). A sandbox that is not running
// listens on nothing.
func (c *Control) Ports(ctx context.Context, who Caller, ref string) (sandbox.Sandbox, []guestports.Listener, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	if !sandbox.Allows(r.State, sandbox.OpAccess) {
		return c.view(r), nil, nil
	}
	listening, err := c.guests().ListeningPorts(ctx, r)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	return c.view(r), listening, nil
}

// GitStatus is the branch, HEAD and dirty files of the clone of the
// caller's sandbox ref, read by git in the guest (as the clone's owner).
func (c *Control) GitStatus(ctx context.Context, who Caller, ref string) (api.GitStatus, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return api.GitStatus{}, err
	}
	if !sandbox.HasClone(r.Sandbox) {
		return api.GitStatus{}, fmt.Errorf("sandbox %s has no git_repo: %w", r.ID, errdefs.ErrNoGitRepo)
	}
	release, err := c.calls.acquire(r.ID, r.AccountID)
	if err != nil {
		return api.GitStatus{}, err
	}
	defer release()
	return c.guests().GitStatus(ctx, r)
}

// DesktopStatus is the desktop of the caller's sandbox ref: not running
// while the sandbox is not (no X server), else what the guest says.
func (c *Control) DesktopStatus(ctx context.Context, who Caller, ref string) (api.DesktopStatus, error) {
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return api.DesktopStatus{}, err
	}
	if err := CheckDesktop(r.Sandbox); err != nil {
		return api.DesktopStatus{}, err
	}
	if !sandbox.Allows(r.State, sandbox.OpAccess) {
		return api.DesktopStatus{Running: false}, nil
	}
	return c.guests().DesktopStatus(ctx, r)
}

// BrowserGrant is what a client needs to drive a sandbox's browser: its
// Chromium's version and DevTools URL (in the guest), and a data-plane
// token.
type BrowserGrant struct {
	Target
	Version   guestread.BrowserVersion
	Token     string
	ExpiresAt time.Time
}

// Browser grants the caller the browser of its sandbox ref for ttl
// seconds (0: 15 minutes, at most an hour).
func (c *Control) Browser(ctx context.Context, who Caller, ref string, ttlSeconds int) (BrowserGrant, error) {
	ttl := DefaultTokenTTL
	if ttlSeconds != 0 {
		if ttlSeconds < 1 || time.Duration(ttlSeconds)*time.Second > MaxTokenTTL {
			return BrowserGrant{}, invalid("ttl_seconds must be within 1..%d", int(MaxTokenTTL.Seconds()))
		}
		ttl = time.Duration(ttlSeconds) * time.Second
	}
	r, err := c.own(ctx, who, ref)
	if err != nil {
		return BrowserGrant{}, err
	}
	if !r.Browser {
		return BrowserGrant{}, noBrowser(r.ID)
	}
	v, err := c.guests().BrowserVersion(ctx, r)
	if err != nil {
		return BrowserGrant{}, err
	}
	keyID, err := c.KeyID(ctx, who)
	if err != nil {
		return BrowserGrant{}, err
	}
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	return BrowserGrant{Target: Target{Sandbox: r.Sandbox, rec: r}, Version: v, Token: c.tokens.issue(r, keyID, exp), ExpiresAt: exp}, nil
}
