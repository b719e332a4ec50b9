package cluster

import (
	"context"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/guestports"
	"github.com/zeish/zeish/internal/guestread"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The public API's reads of a guest and its template builds, on the node
// that holds the guest or the template's files: typed calls of the node
// protocol (2.1).

func (r *Router) ListeningPorts(ctx context.Context, rec *store.SandboxRecord) ([]guestports.Listener, error) {
	_, c, err := r.node(ctx, rec.Host)
	if err != nil {
		return nil, err
	}
	return c.ListeningPorts(ctx, rec.ID)
}

func (r *Router) GitStatus(ctx context.Context, rec *store.SandboxRecord) (api.GitStatus, error) {
	_, c, err := r.node(ctx, rec.Host)
	if err != nil {
		return api.GitStatus{}, err
	}
	return c.GitStatus(ctx, rec.ID)
}

func (r *Router) BrowserVersion(ctx context.Context, rec *store.SandboxRecord) (guestread.BrowserVersion, error) {
	_, c, err := r.node(ctx, rec.Host)
	if err != nil {
		return guestread.BrowserVersion{}, err
	}
	return c.BrowserVersion(ctx, rec.ID)
}

func (r *Router) DesktopStatus(ctx context.Context, rec *store.SandboxRecord) (api.DesktopStatus, error) {
	_, c, err := r.node(ctx, rec.Host)
	if err != nil {
		return api.DesktopStatus{}, err
	}
	return c.DesktopStatus(ctx, rec.ID)
}

// BuildTemplate builds req on the live node with the most free disk, which
// keeps the files and records itself as the template's host.
func (r *Router) BuildTemplate(ctx context.Context, req catalog.BuildRequest) (sandbox.Template, error) {
	n, err := r.buildNode(ctx)
	if err != nil {
		return sandbox.Template{}, err
	}
	return r.client(n).BuildTemplate(ctx, req)
}

func (r *Router) DeleteTemplate(ctx context.Context, node, accountID, ref string) (sandbox.Template, error) {
	_, c, err := r.node(ctx, node)
	if err != nil {
		return sandbox.Template{}, err
	}
	return c.DeleteTemplate(ctx, accountID, ref)
}

func (r *Router) FollowTemplate(ctx context.Context, node, id string, from int, fn func(catalog.Event) error) error {
	_, c, err := r.node(ctx, node)
	if err != nil {
		return err
	}
	return c.FollowTemplate(ctx, id, from, fn)
}
