package nodeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/nodeapi/nodev1"
	"github.com/zeish/zeish/internal/nodeapi/nodev1/nodev1connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Server serves a node's operations (the Node service) to the control plane.
type Server struct {
	node    control.Node
	secrets *Delivered
}

// Handler mounts the Node service for local, behind the control plane's
// call key for this node; st is the store local writes to, which keeps the
// secrets each call delivers.
func Handler(local control.Node, st *Delivered, key *CallKey) (string, http.Handler) {
	return nodev1connect.NewNodeHandler(&Server{node: local, secrets: st}, connect.WithInterceptors(key.ServerAuth()))
}

// deliver keeps the secrets a call brought for sandbox id.
func (s *Server) deliver(id string, env map[string]string) {
	if s.secrets != nil {
		s.secrets.give(id, env)
	}
}

// deliverNew keeps a new sandbox's secrets with their sealed form.
func (s *Server) deliverNew(r *store.SandboxRecord, sealed string) error {
	if len(r.SecretEnv) == 0 {
		return nil
	}
	if r.ID == "" || sealed == "" {
		return fmt.Errorf("a new sandbox with secrets needs the id and the sealed secrets the control plane chose: %w", errdefs.ErrInvalidArgument)
	}
	if s.secrets != nil {
		s.secrets.giveSealed(r.ID, r.SecretEnv, sealed)
	}
	return nil
}

// snapshotSandbox is the sandbox snapshot id was taken of.
func (s *Server) snapshotSandbox(ctx context.Context, id string) string {
	if s.secrets == nil {
		return ""
	}
	snap, err := s.secrets.GetSnapshot(ctx, id)
	if err != nil {
		return ""
	}
	return snap.SandboxID
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, ToWire(fmt.Errorf("encode: %w: %w", errdefs.ErrInternal, err))
	}
	return b, nil
}

func decodeRecord(b []byte, secrets map[string]string) (*store.SandboxRecord, error) {
	r := new(store.SandboxRecord)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("sandbox record: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	if len(secrets) > 0 {
		r.SecretEnv = secrets
	}
	return r, nil
}

func sandboxReply(r *store.SandboxRecord, err error) (*connect.Response[nodev1.SandboxReply], error) {
	if err != nil {
		return nil, ToWire(err)
	}
	b, err := encode(r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodev1.SandboxReply{RecordJson: b}), nil
}

func (s *Server) children(cs []*nodev1.Child) ([]*store.SandboxRecord, error) {
	out := make([]*store.SandboxRecord, len(cs))
	for i, c := range cs {
		r, err := decodeRecord(c.RecordJson, c.SecretEnv)
		if err != nil {
			return nil, err
		}
		if err := s.deliverNew(r, c.SealedSecrets); err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func cloneReply(pause time.Duration, made []*store.SandboxRecord, err error) (*connect.Response[nodev1.CloneReply], error) {
	if err != nil {
		return nil, ToWire(err)
	}
	rep := &nodev1.CloneReply{PauseMicros: pause.Microseconds()}
	for _, r := range made {
		b, err := encode(r)
		if err != nil {
			return nil, err
		}
		rep.RecordsJson = append(rep.RecordsJson, b)
	}
	return connect.NewResponse(rep), nil
}

func (s *Server) Create(ctx context.Context, req *connect.Request[nodev1.CreateRequest]) (*connect.Response[nodev1.SandboxReply], error) {
	r, err := decodeRecord(req.Msg.RecordJson, req.Msg.SecretEnv)
	if err != nil {
		return nil, ToWire(err)
	}
	if err := s.deliverNew(r, req.Msg.SealedSecrets); err != nil {
		return nil, ToWire(err)
	}
	return sandboxReply(s.node.Create(ctx, r))
}

func (s *Server) Clone(ctx context.Context, req *connect.Request[nodev1.CloneRequest]) (*connect.Response[nodev1.CloneReply], error) {
	s.deliver(req.Msg.ParentId, req.Msg.ParentSecretEnv)
	kids, err := s.children(req.Msg.Children)
	if err != nil {
		return nil, ToWire(err)
	}
	return cloneReply(s.node.Clone(ctx, req.Msg.ParentId, kids))
}

func (s *Server) CloneSnapshot(ctx context.Context, req *connect.Request[nodev1.CloneSnapshotRequest]) (*connect.Response[nodev1.CloneReply], error) {
	s.deliver(s.snapshotSandbox(ctx, req.Msg.SnapshotId), req.Msg.ParentSecretEnv)
	kids, err := s.children(req.Msg.Children)
	if err != nil {
		return nil, ToWire(err)
	}
	made, err := s.node.CloneSnapshot(ctx, req.Msg.SnapshotId, kids)
	return cloneReply(0, made, err)
}

func (s *Server) CreateSnapshot(ctx context.Context, req *connect.Request[nodev1.CreateSnapshotRequest]) (*connect.Response[nodev1.SnapshotReply], error) {
	snap, err := s.node.CreateSnapshot(ctx, req.Msg.SandboxId, req.Msg.Name)
	if err != nil {
		return nil, ToWire(err)
	}
	b, err := encode(snap)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodev1.SnapshotReply{SnapshotJson: b}), nil
}

func (s *Server) DeleteSnapshot(ctx context.Context, req *connect.Request[nodev1.DeleteSnapshotRequest]) (*connect.Response[nodev1.DeleteSnapshotReply], error) {
	if err := s.node.DeleteSnapshot(ctx, req.Msg.SnapshotId); err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev1.DeleteSnapshotReply{}), nil
}

func (s *Server) Restore(ctx context.Context, req *connect.Request[nodev1.RestoreRequest]) (*connect.Response[nodev1.RestoreReply], error) {
	s.deliver(s.snapshotSandbox(ctx, req.Msg.SnapshotId), req.Msg.SecretEnv)
	snap, r, err := s.node.Restore(ctx, req.Msg.SnapshotId)
	if err != nil {
		return nil, ToWire(err)
	}
	sb, err := encode(snap)
	if err != nil {
		return nil, err
	}
	rb, err := encode(r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodev1.RestoreReply{SnapshotJson: sb, RecordJson: rb}), nil
}

func (s *Server) Lifecycle(ctx context.Context, req *connect.Request[nodev1.LifecycleRequest]) (*connect.Response[nodev1.SandboxReply], error) {
	id := req.Msg.SandboxId
	switch req.Msg.Op {
	case nodev1.Op_OP_START:
		s.deliver(id, req.Msg.SecretEnv)
		return sandboxReply(s.node.Start(ctx, id))
	case nodev1.Op_OP_STOP:
		if req.Msg.Reason != "" {
			return sandboxReply(s.node.StopReason(ctx, id, req.Msg.Reason))
		}
		return sandboxReply(s.node.Stop(ctx, id))
	case nodev1.Op_OP_PAUSE:
		return sandboxReply(s.node.Pause(ctx, id))
	case nodev1.Op_OP_RESUME:
		return sandboxReply(s.node.Resume(ctx, id))
	case nodev1.Op_OP_DELETE:
		r, err := s.node.Delete(ctx, id)
		if err == nil && s.secrets != nil {
			s.secrets.forget(id)
		}
		return sandboxReply(r, err)
	}
	return nil, ToWire(fmt.Errorf("lifecycle op %v: %w", req.Msg.Op, errdefs.ErrInvalidArgument))
}

func (s *Server) Wait(ctx context.Context, req *connect.Request[nodev1.WaitRequest]) (*connect.Response[nodev1.SandboxReply], error) {
	return sandboxReply(s.node.Wait(ctx, req.Msg.SandboxId, sandbox.State(req.Msg.WantState)))
}

func (s *Server) SetPortPublic(ctx context.Context, req *connect.Request[nodev1.SetPortPublicRequest]) (*connect.Response[nodev1.SandboxReply], error) {
	return sandboxReply(s.node.SetPortPublic(ctx, req.Msg.SandboxId, int(req.Msg.Port), req.Msg.Public))
}

func (s *Server) SetNetwork(ctx context.Context, req *connect.Request[nodev1.SetNetworkRequest]) (*connect.Response[nodev1.SandboxReply], error) {
	var p sandbox.Network
	if err := json.Unmarshal(req.Msg.NetworkJson, &p); err != nil {
		return nil, ToWire(fmt.Errorf("network: %w: %w", errdefs.ErrInvalidArgument, err))
	}
	return sandboxReply(s.node.SetNetwork(ctx, req.Msg.SandboxId, p))
}

// NetBytes is the record's stored counters plus the live link's.
func (s *Server) NetBytes(ctx context.Context, req *connect.Request[nodev1.NetBytesRequest]) (*connect.Response[nodev1.NetBytesReply], error) {
	if s.secrets == nil {
		return nil, ToWire(fmt.Errorf("this node keeps no store: %w", errdefs.ErrUnavailable))
	}
	r, err := s.secrets.GetSandbox(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	in, out := s.node.NetBytes(r)
	return connect.NewResponse(&nodev1.NetBytesReply{In: in, Out: out}), nil
}
