package server

import (
	"context"
	"net/http"

	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/sandbox"
)

// A control plane's ways to its nodes (the cluster package's Router, as
// the server's control.Node). The reads of a guest (guestread.Reads) and
// template builds (NodeTemplates) are typed calls of the node protocol;
// only the data plane, which carries the caller's own token and bytes the
// control plane does not read (guest ports' HTTP, WebSockets, raw TCP), is
// handed on as it is (DataPlaneProxy).

// DataPlaneProxy sends a data-plane request to node nodeID's data plane
// at path, headers (the caller's token) and upgrades kept: the node checks
// the token itself.
type DataPlaneProxy interface {
	ProxyToNode(w http.ResponseWriter, r *http.Request, nodeID, path string)
}

// NodeTemplates builds, deletes and follows templates on nodes: a template
// built from an image lives on the node that built it (its Host).
type NodeTemplates interface {
	// BuildTemplate builds req on the node with the most free disk,
	// streaming its upload there.
	BuildTemplate(ctx context.Context, req catalog.BuildRequest) (sandbox.Template, error)
	DeleteTemplate(ctx context.Context, node, accountID, ref string) (sandbox.Template, error)
	// FollowTemplate calls fn with template id's build log from event
	// from on, until the build ends or ctx does.
	FollowTemplate(ctx context.Context, node, id string, from int, fn func(catalog.Event) error) error
}

// templatesOn is where template t's build, log and delete are: its node's,
// or this server's catalog (one zeishd; a template no node holds).
func (s *Server) templatesOn(t sandbox.Template) (NodeTemplates, bool) {
	nt, ok := s.node.(NodeTemplates)
	return nt, ok && t.Host != ""
}

// WriteError answers err with its status and stable code, as every
// handler of this package does (for handlers outside it, e.g. a proxy).
func WriteError(w http.ResponseWriter, r *http.Request, err error) { writeError(w, r, err) }
