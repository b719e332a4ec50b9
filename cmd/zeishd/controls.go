package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
)

// controls is the Control service of every control-plane replica a node
// agent knows (ZEISH_CONTROL_URL, comma-separated): a call goes to the one
// that answered last, and on to the next while a replica is unreachable,
// so a node keeps heartbeating through the loss of a replica. Calls carry
// the node's credential once it has one (a join does not).
type controls struct {
	mu         sync.Mutex
	clients    []nodev2connect.ControlClient
	cur        int
	credential atomic.Pointer[string]
}

func newControls(list []string, hc *http.Client) *controls {
	c := &controls{}
	for _, u := range list {
		c.clients = append(c.clients, nodev2connect.NewControlClient(hc, u, connect.WithInterceptors(c.auth())))
	}
	return c
}

// setCredential is what the node's later calls authenticate with.
func (c *controls) setCredential(cred string) { c.credential.Store(&cred) }

func (c *controls) auth() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if cred := c.credential.Load(); cred != nil && req.Spec().Procedure != nodev2connect.ControlJoinProcedure {
				req.Header().Set("Authorization", "Bearer "+*cred)
			}
			return next(ctx, req)
		}
	})
}

// unreachable: the replica did not answer (an answer, even an error, ends
// the failover).
func unreachable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

func call[T any](c *controls, f func(nodev2connect.ControlClient) (T, error)) (T, error) {
	c.mu.Lock()
	start := c.cur
	c.mu.Unlock()
	var out T
	var err error
	for i := range c.clients {
		k := (start + i) % len(c.clients)
		if out, err = f(c.clients[k]); err == nil || !unreachable(err) {
			c.mu.Lock()
			c.cur = k
			c.mu.Unlock()
			return out, err
		}
	}
	return out, err
}

func (c *controls) Join(ctx context.Context, req *connect.Request[nodev2.JoinRequest]) (*connect.Response[nodev2.JoinReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.JoinReply], error) {
		return cl.Join(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) Register(ctx context.Context, req *connect.Request[nodev2.RegisterRequest]) (*connect.Response[nodev2.RegisterReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.RegisterReply], error) {
		return cl.Register(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) Heartbeat(ctx context.Context, req *connect.Request[nodev2.HeartbeatRequest]) (*connect.Response[nodev2.HeartbeatReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.HeartbeatReply], error) {
		return cl.Heartbeat(ctx, connect.NewRequest(req.Msg))
	})
}

// The store calls of a node of protocol 2.3 (internal/nodestore), each to
// the replica that answers.

func (c *controls) GetSandbox(ctx context.Context, req *connect.Request[nodev2.StoreSandboxRef]) (*connect.Response[nodev2.StoredSandbox], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoredSandbox], error) {
		return cl.GetSandbox(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) ListSandboxes(ctx context.Context, req *connect.Request[nodev2.StoreListSandboxesRequest]) (*connect.Response[nodev2.StoreListSandboxesReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreListSandboxesReply], error) {
		return cl.ListSandboxes(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) CreateSandboxes(ctx context.Context, req *connect.Request[nodev2.StoreCreateSandboxesRequest]) (*connect.Response[nodev2.StoreCreateSandboxesReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreCreateSandboxesReply], error) {
		return cl.CreateSandboxes(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) UpdateSandbox(ctx context.Context, req *connect.Request[nodev2.StoreUpdateSandboxRequest]) (*connect.Response[nodev2.StoredSandbox], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoredSandbox], error) {
		return cl.UpdateSandbox(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) GetSnapshot(ctx context.Context, req *connect.Request[nodev2.StoreSnapshotRef]) (*connect.Response[nodev2.StoredSnapshot], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoredSnapshot], error) {
		return cl.GetSnapshot(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) ListSnapshots(ctx context.Context, req *connect.Request[nodev2.StoreSandboxRef]) (*connect.Response[nodev2.StoreListSnapshotsReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreListSnapshotsReply], error) {
		return cl.ListSnapshots(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) CreateSnapshotRecord(ctx context.Context, req *connect.Request[nodev2.StoreCreateSnapshotRequest]) (*connect.Response[nodev2.StoredSnapshot], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoredSnapshot], error) {
		return cl.CreateSnapshotRecord(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) DeleteSnapshotRecord(ctx context.Context, req *connect.Request[nodev2.StoreSnapshotRef]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreDeleteReply], error) {
		return cl.DeleteSnapshotRecord(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) GetTemplate(ctx context.Context, req *connect.Request[nodev2.StoreTemplateRef]) (*connect.Response[nodev2.TemplateReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.TemplateReply], error) {
		return cl.GetTemplate(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) ListTemplates(ctx context.Context, req *connect.Request[nodev2.StoreListTemplatesRequest]) (*connect.Response[nodev2.StoreListTemplatesReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreListTemplatesReply], error) {
		return cl.ListTemplates(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) PutTemplate(ctx context.Context, req *connect.Request[nodev2.TemplateReply]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreDeleteReply], error) {
		return cl.PutTemplate(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) DeleteTemplateRecord(ctx context.Context, req *connect.Request[nodev2.StoreTemplateRef]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreDeleteReply], error) {
		return cl.DeleteTemplateRecord(ctx, connect.NewRequest(req.Msg))
	})
}

func (c *controls) ListAPIKeys(ctx context.Context, req *connect.Request[nodev2.StoreAccountRef]) (*connect.Response[nodev2.StoreListAPIKeysReply], error) {
	return call(c, func(cl nodev2connect.ControlClient) (*connect.Response[nodev2.StoreListAPIKeysReply], error) {
		return cl.ListAPIKeys(ctx, connect.NewRequest(req.Msg))
	})
}
