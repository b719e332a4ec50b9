package nodeapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
)

// Server serves a node's operations (the Node service) to the control plane.
type Server struct {
	node      control.Node
	secrets   *Delivered
	templates Templates
}

var _ nodev2connect.NodeHandler = (*Server)(nil)

// ImageCloner is what a node that shares an image store adds to
// control.Node: children of a fork captured on another node, started from
// its image (*node.Node has it).
type ImageCloner interface {
	CloneImage(ctx context.Context, image, parentID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error)
}

// Handler mounts the Node service for local, behind the control plane's
// call key for this node; st is the store local writes to, which keeps the
// secrets each call delivers; templates builds templates (nil: none).
func Handler(local control.Node, st *Delivered, key *CallKey, templates Templates) (string, http.Handler) {
	path, h := nodev2connect.NewNodeHandler(NewServer(local, st, templates), connect.WithInterceptors(key.ServerAuth()))
	return path, undeadlined(h)
}

// NewServer is the Node service of local, unmounted (Handler mounts it).
func NewServer(local control.Node, st *Delivered, templates Templates) *Server {
	return &Server{node: local, secrets: st, templates: templates}
}

// grant keeps the grants a call brought (2.3): the node's store calls
// about those sandboxes carry them.
func (s *Server) grant(gs []*nodev2.Grant) {
	if s.secrets != nil {
		s.secrets.grant(gs)
	}
}

// deliver keeps the secrets a call brought for sandbox id.
func (s *Server) deliver(id string, env map[string]string) {
	if s.secrets != nil {
		s.secrets.give(id, env)
	}
}

// newRecord is a new sandbox the control plane sent, its secrets kept with
// their sealed form.
func (s *Server) newRecord(m *nodev2.Sandbox, env map[string]string, sealed string) (*store.SandboxRecord, error) {
	r, err := SandboxFromWire(m)
	if err != nil {
		return nil, err
	}
	if len(env) == 0 {
		return r, nil
	}
	if r.ID == "" || sealed == "" {
		return nil, fmt.Errorf("a new sandbox with secrets needs the id and the sealed secrets the control plane chose: %w", errdefs.ErrInvalidArgument)
	}
	r.SecretEnv = env
	if s.secrets != nil {
		s.secrets.giveSealed(r.ID, env, sealed)
	}
	return r, nil
}

func sandboxReply(r *store.SandboxRecord, err error) (*connect.Response[nodev2.SandboxReply], error) {
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.SandboxReply{Sandbox: SandboxToWire(r)}), nil
}

// children are a fork's children, which inherit env.
func (s *Server) children(cs []*nodev2.Child, env map[string]string) ([]*store.SandboxRecord, error) {
	out := make([]*store.SandboxRecord, len(cs))
	for i, c := range cs {
		r, err := s.newRecord(c.Sandbox, env, c.SealedSecrets)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func cloneReply(pause time.Duration, made []*store.SandboxRecord, err error) (*connect.Response[nodev2.CloneReply], error) {
	if err != nil {
		return nil, ToWire(err)
	}
	rep := &nodev2.CloneReply{PauseMicros: pause.Microseconds()}
	for _, r := range made {
		rep.Children = append(rep.Children, SandboxToWire(r))
	}
	return connect.NewResponse(rep), nil
}

func (s *Server) Create(ctx context.Context, req *connect.Request[nodev2.CreateRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	s.grant(req.Msg.Grants)
	r, err := s.newRecord(req.Msg.Sandbox, req.Msg.SecretEnv, req.Msg.SealedSecrets)
	if err != nil {
		return nil, ToWire(err)
	}
	return sandboxReply(s.node.Create(ctx, r))
}

func (s *Server) Clone(ctx context.Context, req *connect.Request[nodev2.CloneRequest]) (*connect.Response[nodev2.CloneReply], error) {
	s.grant(req.Msg.Grants)
	s.deliver(req.Msg.ParentId, req.Msg.ParentSecretEnv)
	kids, err := s.children(req.Msg.Children, req.Msg.ParentSecretEnv)
	if err != nil {
		return nil, ToWire(err)
	}
	return cloneReply(s.node.Clone(ctx, req.Msg.ParentId, kids))
}

func (s *Server) CloneSnapshot(ctx context.Context, req *connect.Request[nodev2.CloneSnapshotRequest]) (*connect.Response[nodev2.CloneReply], error) {
	s.grant(req.Msg.Grants)
	s.deliver(req.Msg.SandboxId, req.Msg.ParentSecretEnv)
	kids, err := s.children(req.Msg.Children, req.Msg.ParentSecretEnv)
	if err != nil {
		return nil, ToWire(err)
	}
	made, err := s.node.CloneSnapshot(ctx, req.Msg.SnapshotId, kids)
	return cloneReply(0, made, err)
}

func (s *Server) CloneImage(ctx context.Context, req *connect.Request[nodev2.CloneImageRequest]) (*connect.Response[nodev2.CloneReply], error) {
	s.grant(req.Msg.Grants)
	s.deliver(req.Msg.ParentId, req.Msg.ParentSecretEnv)
	kids, err := s.children(req.Msg.Children, req.Msg.ParentSecretEnv)
	if err != nil {
		return nil, ToWire(err)
	}
	ic, ok := s.node.(ImageCloner)
	if !ok {
		return nil, ToWire(fmt.Errorf("this node starts no sandboxes from the image store: %w", errdefs.ErrUnavailable))
	}
	made, err := ic.CloneImage(ctx, req.Msg.ImageId, req.Msg.ParentId, kids)
	return cloneReply(0, made, err)
}

func (s *Server) CreateSnapshot(ctx context.Context, req *connect.Request[nodev2.CreateSnapshotRequest]) (*connect.Response[nodev2.SnapshotReply], error) {
	snap, err := s.node.CreateSnapshot(ctx, req.Msg.SandboxId, req.Msg.Name)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.SnapshotReply{Snapshot: SnapshotToWire(snap)}), nil
}

func (s *Server) DeleteSnapshot(ctx context.Context, req *connect.Request[nodev2.DeleteSnapshotRequest]) (*connect.Response[nodev2.DeleteSnapshotReply], error) {
	if err := s.node.DeleteSnapshot(ctx, req.Msg.SnapshotId); err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.DeleteSnapshotReply{}), nil
}

func (s *Server) Restore(ctx context.Context, req *connect.Request[nodev2.RestoreRequest]) (*connect.Response[nodev2.RestoreReply], error) {
	s.grant(req.Msg.Grants)
	s.deliver(req.Msg.SandboxId, req.Msg.SecretEnv)
	snap, r, err := s.node.Restore(ctx, req.Msg.SnapshotId)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.RestoreReply{Snapshot: SnapshotToWire(snap), Sandbox: SandboxToWire(r)}), nil
}

func (s *Server) Lifecycle(ctx context.Context, req *connect.Request[nodev2.LifecycleRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	id := req.Msg.SandboxId
	switch req.Msg.Op {
	case nodev2.Op_OP_START:
		s.grant(req.Msg.Grants)
		s.deliver(id, req.Msg.SecretEnv)
		return sandboxReply(s.node.Start(ctx, id))
	case nodev2.Op_OP_STOP:
		if req.Msg.Reason != "" {
			return sandboxReply(s.node.StopReason(ctx, id, req.Msg.Reason))
		}
		return sandboxReply(s.node.Stop(ctx, id))
	case nodev2.Op_OP_PAUSE:
		return sandboxReply(s.node.Pause(ctx, id))
	case nodev2.Op_OP_RESUME:
		return sandboxReply(s.node.Resume(ctx, id))
	case nodev2.Op_OP_DELETE:
		r, err := s.node.Delete(ctx, id)
		if err == nil && s.secrets != nil {
			s.secrets.forget(id)
		}
		return sandboxReply(r, err)
	}
	return nil, ToWire(fmt.Errorf("lifecycle op %v: %w", req.Msg.Op, errdefs.ErrInvalidArgument))
}

func (s *Server) Wait(ctx context.Context, req *connect.Request[nodev2.WaitRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	want, err := stateFromWire(req.Msg.Want)
	if err != nil {
		return nil, ToWire(err)
	}
	return sandboxReply(s.node.Wait(ctx, req.Msg.SandboxId, want))
}

func (s *Server) SetPortPublic(ctx context.Context, req *connect.Request[nodev2.SetPortPublicRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	return sandboxReply(s.node.SetPortPublic(ctx, req.Msg.SandboxId, int(req.Msg.Port), req.Msg.Public))
}

func (s *Server) SetNetwork(ctx context.Context, req *connect.Request[nodev2.SetNetworkRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	p := NetworkFromWire(req.Msg.Network)
	if p == nil {
		return nil, ToWire(fmt.Errorf("set network without a network: %w", errdefs.ErrInvalidArgument))
	}
	return sandboxReply(s.node.SetNetwork(ctx, req.Msg.SandboxId, *p))
}

// NetBytes is the record's stored counters plus the live link's.
func (s *Server) NetBytes(ctx context.Context, req *connect.Request[nodev2.SandboxRef]) (*connect.Response[nodev2.NetBytesReply], error) {
	if s.secrets == nil {
		return nil, ToWire(fmt.Errorf("this node keeps no store: %w", errdefs.ErrUnavailable))
	}
	r, err := s.secrets.GetSandbox(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	in, out := s.node.NetBytes(r)
	return connect.NewResponse(&nodev2.NetBytesReply{In: in, Out: out}), nil
}
