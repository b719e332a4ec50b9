package nodeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev1"
	"github.com/zeish/zeish/internal/nodeapi/nodev1/nodev1connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// RemoteNode calls one node agent's Node service: the operations of
// control.Node that cross the wire, with the secrets of the sandbox each
// one configures (the node cannot open them). Errors come back typed
// (FromWire).
type RemoteNode struct {
	id string
	c  nodev1connect.NodeClient
}

// NewRemoteNode is the client of node id at url (its base URL), calling
// with the node's call key.
func NewRemoteNode(id, url, callKey string, hc *http.Client) *RemoteNode {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &RemoteNode{id: id, c: nodev1connect.NewNodeClient(hc, url, connect.WithInterceptors(Bearer(callKey)))}
}

// ID is the node's id.
func (n *RemoteNode) ID() string { return n.id }

func (n *RemoteNode) record(b []byte, err error) (*store.SandboxRecord, error) {
	if err != nil {
		return nil, FromWire(n.id, err)
	}
	r := new(store.SandboxRecord)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("node %s answered a sandbox we cannot read: %w: %w", n.id, errdefs.ErrInternal, err)
	}
	return r, nil
}

func (n *RemoteNode) sandbox(rep *connect.Response[nodev1.SandboxReply], err error) (*store.SandboxRecord, error) {
	if err != nil {
		return n.record(nil, err)
	}
	return n.record(rep.Msg.RecordJson, nil)
}

func toChildren(rs []*store.SandboxRecord) ([]*nodev1.Child, error) {
	out := make([]*nodev1.Child, len(rs))
	for i, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode child: %w: %w", errdefs.ErrInternal, err)
		}
		out[i] = &nodev1.Child{RecordJson: b, SecretEnv: r.SecretEnv, SealedSecrets: r.SealedSecrets()}
	}
	return out, nil
}

func (n *RemoteNode) made(rep *connect.Response[nodev1.CloneReply], err error) (time.Duration, []*store.SandboxRecord, error) {
	if err != nil {
		return 0, nil, FromWire(n.id, err)
	}
	var out []*store.SandboxRecord
	for _, b := range rep.Msg.RecordsJson {
		r, err := n.record(b, nil)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, r)
	}
	return time.Duration(rep.Msg.PauseMicros) * time.Microsecond, out, nil
}

// Create records and boots r on the node: r's id was chosen by the
// caller, and its secrets go with their sealed form (SetSealedSecrets).
func (n *RemoteNode) Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox: %w: %w", errdefs.ErrInternal, err)
	}
	return n.sandbox(n.c.Create(ctx, connect.NewRequest(&nodev1.CreateRequest{RecordJson: b, SecretEnv: r.SecretEnv, SealedSecrets: r.SealedSecrets()})))
}

// Clone forks parentID, whose secrets the children inherit.
func (n *RemoteNode) Clone(ctx context.Context, parentID string, parentSecrets map[string]string, children []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	kids, err := toChildren(children)
	if err != nil {
		return 0, nil, err
	}
	return n.made(n.c.Clone(ctx, connect.NewRequest(&nodev1.CloneRequest{ParentId: parentID, Children: kids, ParentSecretEnv: parentSecrets})))
}

// CloneSnapshot starts children of snapshot snapID, with the secrets of
// its sandbox.
func (n *RemoteNode) CloneSnapshot(ctx context.Context, snapID string, parentSecrets map[string]string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	kids, err := toChildren(children)
	if err != nil {
		return nil, err
	}
	_, made, err := n.made(n.c.CloneSnapshot(ctx, connect.NewRequest(&nodev1.CloneSnapshotRequest{SnapshotId: snapID, Children: kids, ParentSecretEnv: parentSecrets})))
	return made, err
}

func (n *RemoteNode) snapshot(b []byte) (*store.SnapshotRecord, error) {
	s := new(store.SnapshotRecord)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("node %s answered a snapshot we cannot read: %w: %w", n.id, errdefs.ErrInternal, err)
	}
	return s, nil
}

func (n *RemoteNode) CreateSnapshot(ctx context.Context, id, name string) (*store.SnapshotRecord, error) {
	rep, err := n.c.CreateSnapshot(ctx, connect.NewRequest(&nodev1.CreateSnapshotRequest{SandboxId: id, Name: name}))
	if err != nil {
		return nil, FromWire(n.id, err)
	}
	return n.snapshot(rep.Msg.SnapshotJson)
}

func (n *RemoteNode) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := n.c.DeleteSnapshot(ctx, connect.NewRequest(&nodev1.DeleteSnapshotRequest{SnapshotId: id}))
	return FromWire(n.id, err)
}

// Restore rolls the snapshot's sandbox back; its secrets are delivered again.
func (n *RemoteNode) Restore(ctx context.Context, snapID string, secrets map[string]string) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	rep, err := n.c.Restore(ctx, connect.NewRequest(&nodev1.RestoreRequest{SnapshotId: snapID, SecretEnv: secrets}))
	if err != nil {
		return nil, nil, FromWire(n.id, err)
	}
	s, err := n.snapshot(rep.Msg.SnapshotJson)
	if err != nil {
		return nil, nil, err
	}
	r, err := n.record(rep.Msg.RecordJson, nil)
	return s, r, err
}

func (n *RemoteNode) lifecycle(ctx context.Context, id string, op nodev1.Op, reason string) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Lifecycle(ctx, connect.NewRequest(&nodev1.LifecycleRequest{SandboxId: id, Op: op, Reason: reason})))
}

// Start starts a stopped sandbox; its secrets are delivered again.
func (n *RemoteNode) Start(ctx context.Context, id string, secrets map[string]string) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Lifecycle(ctx, connect.NewRequest(&nodev1.LifecycleRequest{SandboxId: id, Op: nodev1.Op_OP_START, SecretEnv: secrets})))
}
func (n *RemoteNode) Stop(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev1.Op_OP_STOP, "")
}
func (n *RemoteNode) StopReason(ctx context.Context, id, reason string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev1.Op_OP_STOP, reason)
}
func (n *RemoteNode) Pause(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev1.Op_OP_PAUSE, "")
}
func (n *RemoteNode) Resume(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev1.Op_OP_RESUME, "")
}
func (n *RemoteNode) Delete(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev1.Op_OP_DELETE, "")
}

func (n *RemoteNode) Wait(ctx context.Context, id string, want sandbox.State) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Wait(ctx, connect.NewRequest(&nodev1.WaitRequest{SandboxId: id, WantState: string(want)})))
}

func (n *RemoteNode) SetPortPublic(ctx context.Context, id string, port int, public bool) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.SetPortPublic(ctx, connect.NewRequest(&nodev1.SetPortPublicRequest{SandboxId: id, Port: int32(port), Public: public})))
}

func (n *RemoteNode) SetNetwork(ctx context.Context, id string, p sandbox.Network) (*store.SandboxRecord, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode network: %w: %w", errdefs.ErrInternal, err)
	}
	return n.sandbox(n.c.SetNetwork(ctx, connect.NewRequest(&nodev1.SetNetworkRequest{SandboxId: id, NetworkJson: b})))
}

// NetBytes is the sandbox's traffic so far as its node counts it.
func (n *RemoteNode) NetBytes(ctx context.Context, id string) (in, out uint64, err error) {
	rep, err := n.c.NetBytes(ctx, connect.NewRequest(&nodev1.NetBytesRequest{SandboxId: id}))
	if err != nil {
		return 0, 0, FromWire(n.id, err)
	}
	return rep.Msg.In, rep.Msg.Out, nil
}
