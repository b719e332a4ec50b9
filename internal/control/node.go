package control

import (
	"context"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Node is what the control plane needs of a node, the host that runs a
// sandbox's VM: the local one (*node.Node) today, a remote node agent
// later. The control plane owns this interface; a node satisfies it.
type Node interface {
	// Region is the node's region label; Capabilities its VMM's.
	Region() string
	Capabilities() vmm.Capabilities

	// Create records r (validated, admitted) and boots it in the background.
	Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error)
	// Clone captures parentID and boots children from the image; pause is
	// how long the parent did not run.
	Clone(ctx context.Context, parentID string, children []*store.SandboxRecord) (pause time.Duration, made []*store.SandboxRecord, err error)
	// CloneSnapshot boots children from a snapshot's image; its sandbox is
	// not touched.
	CloneSnapshot(ctx context.Context, snapID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error)
	CreateSnapshot(ctx context.Context, id, name string) (*store.SnapshotRecord, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Restore(ctx context.Context, snapID string) (*store.SnapshotRecord, *store.SandboxRecord, error)

	// The lifecycle (sandbox.Next decides which state allows which).
	Start(ctx context.Context, id string) (*store.SandboxRecord, error)
	Stop(ctx context.Context, id string) (*store.SandboxRecord, error)
	StopReason(ctx context.Context, id, reason string) (*store.SandboxRecord, error)
	Pause(ctx context.Context, id string) (*store.SandboxRecord, error)
	Resume(ctx context.Context, id string) (*store.SandboxRecord, error)
	Delete(ctx context.Context, id string) (*store.SandboxRecord, error)
	// Wait blocks until the sandbox settles, or reaches want if given.
	Wait(ctx context.Context, id string, want sandbox.State) (*store.SandboxRecord, error)
	// Changed is closed at the sandbox's next change.
	Changed(id string) <-chan struct{}

	// The data plane: the guest's agent, its ports and its network.
	Agent(ctx context.Context, r *store.SandboxRecord) (*guest.Client, error)
	PortAddr(r *store.SandboxRecord, port int) (string, error)
	SetPortPublic(ctx context.Context, id string, port int, public bool) (*store.SandboxRecord, error)
	SetNetwork(ctx context.Context, id string, p sandbox.Network) (*store.SandboxRecord, error)
	// NetBytes is the sandbox's traffic in and out so far (usage).
	NetBytes(r *store.SandboxRecord) (in, out uint64)
}
