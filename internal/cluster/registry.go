package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
)

// Registry serves the Control service: node agents join (a join token for
// their own credential), register and heartbeat into the database, each as
// its own id only, and get the keys of that node alone.
type Registry struct {
	Nodes store.NodeStore
	// Store is the shared store the store calls of 2.3 nodes run against
	// (nodestore.go); Secrets opens the sealed secrets of the rows they
	// create (sealed here, for their ids).
	Store   store.Store
	Secrets store.Codec
	// Key is the control plane's key (token.key, shared by replicas) the
	// keys of each node are derived from (DataPlaneKey, CallKey).
	Key []byte
	// AllowHTTP accepts node URLs of plain http:// (a private network, a
	// test); otherwise a node registers an https:// URL.
	AllowHTTP bool
	// Every is how often nodes are asked to heartbeat.
	Every  time.Duration
	Logger *slog.Logger
}

// Handler mounts the Control service: Join on a join token, every other
// call on the calling node's credential.
func (g *Registry) Handler() (string, http.Handler) {
	return nodev2connect.NewControlHandler(g, connect.WithInterceptors(g.authenticate()))
}

var nodeIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// callerKey carries the node id a call's credential belongs to.
type callerKey struct{}

// caller is the node whose credential authenticated the call.
func caller(ctx context.Context) string {
	id, _ := ctx.Value(callerKey{}).(string)
	return id
}

// authenticate checks every call but Join carries a node's credential that
// matches the hash on its row (a revoked or replaced one does not), and
// names that node as the caller.
func (g *Registry) authenticate() connect.Interceptor {
	return nodeapi.Authenticate(func(ctx context.Context, procedure string, h http.Header) (context.Context, error) {
		if procedure == nodev2connect.ControlJoinProcedure {
			return ctx, nil
		}
		bearer, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		id, secret, err := parseCredential(bearer)
		if err != nil {
			return ctx, nodeapi.ToWire(err)
		}
		n, err := g.Nodes.GetNode(ctx, id)
		if err != nil && !errdefs.Is(err, errdefs.ClassNotFound) {
			return ctx, nodeapi.ToWire(fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err))
		}
		if err != nil || !sameHash(secret, n.CredentialHash) {
			return ctx, nodeapi.ToWire(fmt.Errorf("the credential of node %s is not valid (revoked, replaced by a new join, or never issued): join again with a join token: %w", id, errdefs.ErrUnauthenticated))
		}
		return context.WithValue(ctx, callerKey{}, id), nil
	})
}

// actsAs refuses a call about node id from another node's credential.
func actsAs(ctx context.Context, id string) error {
	if c := caller(ctx); c != id {
		return fmt.Errorf("this credential is node %s's; it cannot act as node %s: %w", c, id, errdefs.ErrForbidden)
	}
	return nil
}

// Join trades a join token for the node's credential (see identity.go).
func (g *Registry) Join(ctx context.Context, req *connect.Request[nodev2.JoinRequest]) (*connect.Response[nodev2.JoinReply], error) {
	m := req.Msg
	if !nodeIDPattern.MatchString(m.NodeId) {
		return nil, nodeapi.ToWire(fmt.Errorf("node id %q: want lower-case letters, digits, '.', '_' or '-': %w", m.NodeId, errdefs.ErrInvalidArgument))
	}
	tokenID, secret, err := parseJoinToken(m.JoinToken)
	if err != nil {
		return nil, nodeapi.ToWire(err)
	}
	var cred string
	_, err = g.Nodes.JoinNode(ctx, tokenID, m.NodeId, func(t *store.JoinToken, n *store.NodeRecord) error {
		cred, err = spend(t, n, secret, time.Now())
		return err
	})
	switch {
	case errdefs.Is(err, errdefs.ClassNotFound):
		err = fmt.Errorf("join token not valid: %w", errdefs.ErrUnauthenticated)
	case err != nil && errdefs.Of(err) == errdefs.ErrInternal:
		err = fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	if err != nil {
		g.log().Warn("node join refused", "node", m.NodeId, "err", err)
		return nil, nodeapi.ToWire(err)
	}
	g.log().Info("node joined", "node", m.NodeId, "join_token", tokenID)
	return connect.NewResponse(&nodev2.JoinReply{Credential: cred}), nil
}

// checkURL refuses a node URL the control plane should not call.
func (g *Registry) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("node url %q: want https://host:port: %w", raw, errdefs.ErrInvalidArgument)
	}
	if u.Scheme == "http" && !g.AllowHTTP {
		return fmt.Errorf("node url %q: plain http carries the call key and the data plane's tokens in the clear; serve the node over TLS (ZEISH_TLS_CERT) with an https:// ZEISH_NODE_URL, or set ZEISH_CLUSTER_ALLOW_HTTP=on on a private network: %w",
			raw, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (g *Registry) Register(ctx context.Context, req *connect.Request[nodev2.RegisterRequest]) (*connect.Response[nodev2.RegisterReply], error) {
	m := req.Msg
	if err := actsAs(ctx, m.NodeId); err != nil {
		return nil, nodeapi.ToWire(err)
	}
	minor, err := nodeapi.Agree(m.Version)
	if err != nil {
		return nil, nodeapi.ToWire(err)
	}
	if err := g.checkURL(m.Url); err != nil {
		return nil, nodeapi.ToWire(err)
	}
	now := time.Now().UTC()
	protocol := nodeapi.Format(nodeapi.ProtocolMajor, minor)
	_, err = g.Nodes.UpdateNode(ctx, m.NodeId, func(n *store.NodeRecord) error {
		n.Region, n.Labels, n.URL, n.Version, n.Protocol = m.Region, m.Labels, m.Url, m.Build, protocol
		n.Capacity, n.Healthy = nodeapi.CapacityFromWire(m.Capacity), m.Healthy
		n.RegisteredAt, n.HeartbeatAt = now, now // Draining is kept: a restart does not undo a drain
		return nil
	})
	if err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err))
	}
	g.log().Info("node registered", "node", m.NodeId, "region", m.Region, "url", m.Url, "labels", m.Labels, "protocol", protocol)
	return connect.NewResponse(&nodev2.RegisterReply{Version: &nodev2.Version{Major: nodeapi.ProtocolMajor, Minor: minor},
		TokenKey: DataPlaneKey(g.Key, m.NodeId), CallKey: CallKey(g.Key, m.NodeId), HeartbeatMillis: g.Every.Milliseconds()}), nil
}

func (g *Registry) Heartbeat(ctx context.Context, req *connect.Request[nodev2.HeartbeatRequest]) (*connect.Response[nodev2.HeartbeatReply], error) {
	m := req.Msg
	if err := actsAs(ctx, m.NodeId); err != nil {
		return nil, nodeapi.ToWire(err)
	}
	if _, err := g.Nodes.GetNode(ctx, m.NodeId); err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("node %s: register first: %w", m.NodeId, err))
	}
	n, err := g.Nodes.UpdateNode(ctx, m.NodeId, func(n *store.NodeRecord) error {
		n.Capacity, n.Healthy, n.HeartbeatAt = nodeapi.CapacityFromWire(m.Capacity), m.Healthy, time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, nodeapi.ToWire(fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err))
	}
	return connect.NewResponse(&nodev2.HeartbeatReply{Draining: n.Draining}), nil
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
