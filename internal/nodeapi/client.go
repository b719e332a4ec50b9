package nodeapi

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// RemoteNode calls one node agent's Node service: the operations of
// control.Node that cross the wire, with the secrets of the sandbox each
// one configures (the node cannot open them), and only those the protocol
// version agreed with the node has. Errors come back typed (FromWire).
type RemoteNode struct {
	id    string
	minor uint32
	c     nodev2connect.NodeClient
	// grants makes the grants that let the node at the rows of ids
	// (nil: none; a node on the database needs none).
	grants func(ids ...string) []*nodev2.Grant
}

// SetGrants sets how the grants sent with operations are made.
func (n *RemoteNode) SetGrants(f func(ids ...string) []*nodev2.Grant) { n.grants = f }

// grant is the grants of ids, and of children's ids.
func (n *RemoteNode) grant(children []*store.SandboxRecord, ids ...string) []*nodev2.Grant {
	if n.grants == nil {
		return nil
	}
	for _, c := range children {
		ids = append(ids, c.ID)
	}
	return n.grants(ids...)
}

// NewRemoteNode is the client of node id at url (its base URL), calling
// with the node's call key, at the minor protocol version agreed with it.
func NewRemoteNode(id, url, callKey string, minor uint32, hc *http.Client) *RemoteNode {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &RemoteNode{id: id, minor: minor, c: nodev2connect.NewNodeClient(hc, url, connect.WithInterceptors(Bearer(callKey)))}
}

// ID is the node's id.
func (n *RemoteNode) ID() string { return n.id }

func (n *RemoteNode) sandbox(rep *connect.Response[nodev2.SandboxReply], err error) (*store.SandboxRecord, error) {
	if err != nil {
		return nil, FromWire(n.id, err)
	}
	return n.read(SandboxFromWire(rep.Msg.Sandbox))
}

// read marks a reply the node answered that this side cannot read.
func (n *RemoteNode) read(r *store.SandboxRecord, err error) (*store.SandboxRecord, error) {
	if err != nil {
		return nil, unreadable(n.id, err)
	}
	return r, nil
}

func toChildren(rs []*store.SandboxRecord) []*nodev2.Child {
	out := make([]*nodev2.Child, len(rs))
	for i, r := range rs {
		out[i] = &nodev2.Child{Sandbox: SandboxToWire(r), SealedSecrets: r.SealedSecrets()}
	}
	return out
}

func (n *RemoteNode) made(rep *connect.Response[nodev2.CloneReply], err error) (time.Duration, []*store.SandboxRecord, error) {
	if err != nil {
		return 0, nil, FromWire(n.id, err)
	}
	out := make([]*store.SandboxRecord, 0, len(rep.Msg.Children))
	for _, m := range rep.Msg.Children {
		r, err := n.read(SandboxFromWire(m))
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
	return n.sandbox(n.c.Create(ctx, connect.NewRequest(&nodev2.CreateRequest{Sandbox: SandboxToWire(r),
		SecretEnv: r.SecretEnv, SealedSecrets: r.SealedSecrets(), Grants: n.grant(nil, r.ID)})))
}

// Clone forks parentID, whose secrets the children inherit.
func (n *RemoteNode) Clone(ctx context.Context, parentID string, parentSecrets map[string]string, children []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	return n.made(n.c.Clone(ctx, connect.NewRequest(&nodev2.CloneRequest{ParentId: parentID, Children: toChildren(children),
		ParentSecretEnv: parentSecrets, Grants: n.grant(children)})))
}

// CloneSnapshot starts children of snapshot snapID of sandbox sandboxID,
// with the secrets of that sandbox.
func (n *RemoteNode) CloneSnapshot(ctx context.Context, snapID, sandboxID string, parentSecrets map[string]string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	_, made, err := n.made(n.c.CloneSnapshot(ctx, connect.NewRequest(&nodev2.CloneSnapshotRequest{SnapshotId: snapID, SandboxId: sandboxID,
		Children: toChildren(children), ParentSecretEnv: parentSecrets, Grants: n.grant(children, sandboxID)})))
	return made, err
}

// CloneImage starts children of sandbox parentID from image, its fork's
// image, which the node fetches from the image store (2.2).
func (n *RemoteNode) CloneImage(ctx context.Context, image, parentID string, parentSecrets map[string]string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	if err := needs(n.id, n.minor, MinorImages, "starting a fork's children away from its parent"); err != nil {
		return nil, err
	}
	_, made, err := n.made(n.c.CloneImage(ctx, connect.NewRequest(&nodev2.CloneImageRequest{ImageId: image, ParentId: parentID,
		Children: toChildren(children), ParentSecretEnv: parentSecrets, Grants: n.grant(children, parentID)})))
	return made, err
}

// Needs refuses what needs protocol minor want of a node that speaks an
// older one, saying what (unavailable: another node may do it).
func (n *RemoteNode) Needs(want uint32, what string) error { return needs(n.id, n.minor, want, what) }

func (n *RemoteNode) CreateSnapshot(ctx context.Context, id, name string) (*store.SnapshotRecord, error) {
	rep, err := n.c.CreateSnapshot(ctx, connect.NewRequest(&nodev2.CreateSnapshotRequest{SandboxId: id, Name: name}))
	if err != nil {
		return nil, FromWire(n.id, err)
	}
	s, err := SnapshotFromWire(rep.Msg.Snapshot)
	if err != nil {
		return nil, unreadable(n.id, err)
	}
	return s, nil
}

func (n *RemoteNode) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := n.c.DeleteSnapshot(ctx, connect.NewRequest(&nodev2.DeleteSnapshotRequest{SnapshotId: id}))
	return FromWire(n.id, err)
}

// Restore rolls sandbox sandboxID back to snapshot snapID; its secrets are
// delivered again.
func (n *RemoteNode) Restore(ctx context.Context, snapID, sandboxID string, secrets map[string]string) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	rep, err := n.c.Restore(ctx, connect.NewRequest(&nodev2.RestoreRequest{SnapshotId: snapID, SandboxId: sandboxID, SecretEnv: secrets,
		Grants: n.grant(nil, sandboxID)}))
	if err != nil {
		return nil, nil, FromWire(n.id, err)
	}
	s, err := SnapshotFromWire(rep.Msg.Snapshot)
	if err != nil {
		return nil, nil, unreadable(n.id, err)
	}
	r, err := n.read(SandboxFromWire(rep.Msg.Sandbox))
	return s, r, err
}

func (n *RemoteNode) lifecycle(ctx context.Context, id string, op nodev2.Op, reason string) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Lifecycle(ctx, connect.NewRequest(&nodev2.LifecycleRequest{SandboxId: id, Op: op, Reason: reason})))
}

// Start starts a stopped sandbox; its secrets are delivered again.
func (n *RemoteNode) Start(ctx context.Context, id string, secrets map[string]string) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Lifecycle(ctx, connect.NewRequest(&nodev2.LifecycleRequest{SandboxId: id, Op: nodev2.Op_OP_START, SecretEnv: secrets,
		Grants: n.grant(nil, id)})))
}
func (n *RemoteNode) Stop(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev2.Op_OP_STOP, "")
}
func (n *RemoteNode) StopReason(ctx context.Context, id, reason string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev2.Op_OP_STOP, reason)
}
func (n *RemoteNode) Pause(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev2.Op_OP_PAUSE, "")
}
func (n *RemoteNode) Resume(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev2.Op_OP_RESUME, "")
}
func (n *RemoteNode) Delete(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return n.lifecycle(ctx, id, nodev2.Op_OP_DELETE, "")
}

func (n *RemoteNode) Wait(ctx context.Context, id string, want sandbox.State) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.Wait(ctx, connect.NewRequest(&nodev2.WaitRequest{SandboxId: id, Want: stateToWire(want)})))
}

func (n *RemoteNode) SetPortPublic(ctx context.Context, id string, port int, public bool) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.SetPortPublic(ctx, connect.NewRequest(&nodev2.SetPortPublicRequest{SandboxId: id, Port: int32(port), Public: public})))
}

func (n *RemoteNode) SetNetwork(ctx context.Context, id string, p sandbox.Network) (*store.SandboxRecord, error) {
	return n.sandbox(n.c.SetNetwork(ctx, connect.NewRequest(&nodev2.SetNetworkRequest{SandboxId: id, Network: NetworkToWire(&p)})))
}

// NetBytes is the sandbox's traffic so far as its node counts it.
func (n *RemoteNode) NetBytes(ctx context.Context, id string) (in, out uint64, err error) {
	rep, err := n.c.NetBytes(ctx, connect.NewRequest(&nodev2.SandboxRef{SandboxId: id}))
	if err != nil {
		return 0, 0, FromWire(n.id, err)
	}
	return rep.Msg.In, rep.Msg.Out, nil
}
