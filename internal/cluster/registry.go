package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev1"
	"github.com/zeish/zeish/internal/nodeapi/nodev1/nodev1connect"
	"github.com/zeish/zeish/internal/store"
)

// Registry serves the Control service: node agents register and heartbeat
// into the database, and get the keys they need.
type Registry struct {
	Nodes store.NodeStore
	// TokenKey signs data-plane tokens; nodes verify them offline with it.
	TokenKey []byte
	// SecretsKey seals sandbox secrets in the store; nodes open them.
	SecretsKey []byte
	// Every is how often nodes are asked to heartbeat.
	Every  time.Duration
	Logger *slog.Logger
}

// Handler mounts the Control service behind the node token.
func (g *Registry) Handler(token nodeapi.Token) (string, http.Handler) {
	return nodev1connect.NewControlHandler(g, connect.WithInterceptors(token.ServerAuth()))
}

var nodeIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func capacity(c *nodev1.Capacity) store.NodeCapacity {
	if c == nil {
		return store.NodeCapacity{}
	}
	return store.NodeCapacity{MemoryBudgetMiB: int(c.MemoryBudgetMib), MemoryCommittedMiB: int(c.MemoryCommittedMib),
		ImageRAMMiB: int(c.ImageRamMib), VCPUs: int(c.Vcpus), DiskFreeMiB: int(c.DiskFreeMib), Accel: c.Accel, VMM: c.Vmm}
}

func (g *Registry) Register(ctx context.Context, req *connect.Request[nodev1.RegisterRequest]) (*connect.Response[nodev1.RegisterReply], error) {
	m := req.Msg
	if m.Protocol != nodeapi.ProtocolVersion {
		return nil, nodeapi.ToWire(fmt.Errorf("node protocol %d, this control plane speaks %d: %w", m.Protocol, nodeapi.ProtocolVersion, errdefs.ErrInvalidArgument))
	}
	if !nodeIDPattern.MatchString(m.NodeId) {
		return nil, nodeapi.ToWire(fmt.Errorf("node id %q: want lower-case letters, digits, '.', '_' or '-': %w", m.NodeId, errdefs.ErrInvalidArgument))
	}
	if u, err := url.Parse(m.Url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nodeapi.ToWire(fmt.Errorf("node url %q: want http(s)://host:port: %w", m.Url, errdefs.ErrInvalidArgument))
	}
	now := time.Now().UTC()
	_, err := g.Nodes.UpdateNode(ctx, m.NodeId, func(n *store.NodeRecord) error {
		n.Region, n.Labels, n.URL, n.Version = m.Region, m.Labels, m.Url, m.Version
		n.Capacity, n.Healthy = capacity(m.Capacity), m.Healthy
		n.RegisteredAt, n.HeartbeatAt = now, now // Draining is kept: a restart does not undo a drain
		return nil
	})
	if err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err))
	}
	g.log().Info("node registered", "node", m.NodeId, "region", m.Region, "url", m.Url, "labels", m.Labels)
	return connect.NewResponse(&nodev1.RegisterReply{TokenKey: g.TokenKey, SecretsKey: g.SecretsKey,
		HeartbeatMillis: g.Every.Milliseconds()}), nil
}

func (g *Registry) Heartbeat(ctx context.Context, req *connect.Request[nodev1.HeartbeatRequest]) (*connect.Response[nodev1.HeartbeatReply], error) {
	m := req.Msg
	if _, err := g.Nodes.GetNode(ctx, m.NodeId); err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("node %s: register first: %w", m.NodeId, err))
	}
	n, err := g.Nodes.UpdateNode(ctx, m.NodeId, func(n *store.NodeRecord) error {
		n.Capacity, n.Healthy, n.HeartbeatAt = capacity(m.Capacity), m.Healthy, time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err))
	}
	return connect.NewResponse(&nodev1.HeartbeatReply{Draining: n.Draining}), nil
}

func (g *Registry) log() *slog.Logger {
	if g.Logger == nil {
		return slog.Default()
	}
	return g.Logger
}

// Drain sets whether node id takes new sandboxes (its own keep running).
func Drain(ctx context.Context, nodes store.NodeStore, id string, drain bool) (store.NodeRecord, error) {
	if _, err := nodes.GetNode(ctx, id); err != nil {
		return store.NodeRecord{}, err
	}
	return nodes.UpdateNode(ctx, id, func(n *store.NodeRecord) error { n.Draining = drain; return nil })
}
