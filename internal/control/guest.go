package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/gitws"
	"github.com/zeish/zeish/internal/guestports"
	"github.com/zeish/zeish/sandbox"
)

// Control-plane calls that read a sandbox's guest through its agent: its
// listening ports, its git clone, its desktop, its browser. In a cluster
// they run on the sandbox's node.

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
	agent, err := c.node.Agent(ctx, r)
	if err != nil {
		return sandbox.Sandbox{}, nil, err
	}
	listening, err := guestports.Listening(ctx, agent)
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
	agent, release, err := c.agent(ctx, r)
	if err != nil {
		return api.GitStatus{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := gitws.Status(ctx, agent, r.Sandbox)
	if gerr := (*gitws.Error)(nil); errors.As(err, &gerr) || errors.Is(err, gitws.NoGit) {
		// The clone is the guest's: its processes may have removed or broken it.
		err = fmt.Errorf("in %s: %v: %w", r.GitPath, err, errdefs.ErrInvalidState)
	}
	return st, err
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
	agent, err := c.node.Agent(ctx, r)
	if err != nil {
		return api.DesktopStatus{}, err
	}
	return agent.DesktopStatus(ctx)
}

// BrowserGrant is what a client needs to drive a sandbox's browser: where
// its DevTools endpoint is reached from here, and a data-plane token.
type BrowserGrant struct {
	Target
	Addr      string // the guest's DevTools host:port
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
	addr, err := c.node.PortAddr(r, sandbox.BrowserPort)
	if err != nil {
		return BrowserGrant{}, err
	}
	keyID, err := c.KeyID(ctx, who)
	if err != nil {
		return BrowserGrant{}, err
	}
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	return BrowserGrant{Target: Target{Sandbox: r.Sandbox, rec: r}, Addr: addr, Token: c.tokens.issue(r.ID, r.AccountID, keyID, exp), ExpiresAt: exp}, nil
}
