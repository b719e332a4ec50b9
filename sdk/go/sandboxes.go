package zeish

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/zeish/zeish/api"
)

// CallOption adjusts one control-plane call (Wait, and more as the API grows).
type CallOption func(*callOptions)

type callOptions struct {
	wait bool
}

// Wait makes an asynchronous call (create, delete, the lifecycle calls, clone
// and restore) return only once the sandbox has settled (for clone: every
// child has), instead of at once with 202.
func Wait() CallOption {
	return func(o *callOptions) { o.wait = true }
}

// applyCallOptions turns the options into the query string every asynchronous route
// understands.
func applyCallOptions(opts []CallOption) url.Values {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	q := url.Values{}
	if o.wait {
		q.Set("wait", "true")
	}
	return q
}

// ListOptions filters ListSandboxes.
type ListOptions struct {
	State            State // only sandboxes in this state; empty: any
	IncludeDestroyed bool  // also list destroyed sandboxes, kept for history
}

// sandboxPath is the route of one sandbox; sub ("/wait", "/clone", …) is
// appended as is.
func sandboxPath(id, sub string) string {
	return "/public/sandboxes/" + url.PathEscape(id) + sub
}

// Health reports whether zeishd is up and which VMM and acceleration it uses.
// It needs no API key.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.call(ctx, request{method: http.MethodGet, url: c.rootURL() + "/healthz"}, &h)
	return h, err
}

// CreateSandbox starts a sandbox. It returns at once with the sandbox in state
// starting, unless Wait() is given: then it returns once the sandbox settled
// (running, or error).
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest, opts ...CallOption) (Sandbox, error) {
	var sb Sandbox
	r := c.control(http.MethodPost, "/public/sandboxes", req)
	r.query = applyCallOptions(opts)
	err := c.call(ctx, r, &sb)
	return sb, settledErr(sb, err, opts)
}

// ListSandboxes lists the account's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error) {
	r := c.control(http.MethodGet, "/public/sandboxes", nil)
	r.query = opts.query()
	var list api.SandboxList
	if err := c.call(ctx, r, &list); err != nil {
		return nil, err
	}
	return list.Sandboxes, nil
}

func (opts ListOptions) query() url.Values {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", string(opts.State))
	}
	if opts.IncludeDestroyed {
		q.Set("include_destroyed", "true")
	}
	return q
}

// ListSandboxesPage lists at most limit sandboxes after the sandbox id after
// ("" = from the first); next is the after of the next page, "" when this
// one was the last.
func (c *Client) ListSandboxesPage(ctx context.Context, opts ListOptions, limit int, after string) (page []Sandbox, next string, err error) {
	r := c.control(http.MethodGet, "/public/sandboxes", nil)
	r.query = opts.query()
	r.query.Set("limit", strconv.Itoa(limit))
	if after != "" {
		r.query.Set("after", after)
	}
	var list api.SandboxList
	if err := c.call(ctx, r, &list); err != nil {
		return nil, "", err
	}
	return list.Sandboxes, list.NextAfter, nil
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.call(ctx, c.control(http.MethodGet, sandboxPath(id, ""), nil), &sb)
	return sb, err
}

// DeleteSandbox destroys a sandbox and its snapshots. It returns at once with
// the sandbox in state deleting, unless Wait() is given: then in state
// destroyed.
func (c *Client) DeleteSandbox(ctx context.Context, id string, opts ...CallOption) (Sandbox, error) {
	var sb Sandbox
	r := c.control(http.MethodDelete, sandboxPath(id, ""), nil)
	r.query = applyCallOptions(opts)
	err := c.call(ctx, r, &sb)
	return sb, err
}

// WaitSandbox blocks until the sandbox settles, or reaches req.State if set.
// The server gives up after req.TimeoutSeconds with errdefs.ErrTimeout.
func (c *Client) WaitSandbox(ctx context.Context, id string, req WaitRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.call(ctx, c.control(http.MethodPost, sandboxPath(id, "/wait"), req), &sb)
	return sb, err
}

// Access returns a data-plane credential for one sandbox, valid for ttl (0:
// the server's default of 15 minutes). Most callers want Connect, which
// renews it on its own. A relative URL from the server is made absolute.
func (c *Client) Access(ctx context.Context, id string, ttl time.Duration) (Access, error) {
	var acc Access
	req := api.AccessRequest{TTLSeconds: int(ttl / time.Second)}
	if err := c.call(ctx, c.control(http.MethodPost, sandboxPath(id, "/access"), req), &acc); err != nil {
		return Access{}, err
	}
	u, err := c.resolve(acc.URL)
	if err != nil {
		return Access{}, err
	}
	acc.URL = u
	return acc, nil
}
