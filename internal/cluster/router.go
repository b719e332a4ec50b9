package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Options configure a Router.
type Options struct {
	Store store.Store
	Nodes store.NodeStore
	// Key is the control plane's key (token.key) each node's call key is
	// derived from (CallKey).
	Key []byte
	// Secrets seals the secrets of the sandboxes the router has nodes
	// create (nodes write their rows but cannot seal).
	Secrets store.Codec
	// LostAfter is how long a node may go without a heartbeat before it
	// gets no placements and its sandboxes are marked lost.
	LostAfter time.Duration
	// HTTP carries the node protocol (nil: a client of its own); Proxy
	// the data plane handed on to nodes, which needs HTTP/1.1 upgrades
	// (nil: http.DefaultTransport).
	HTTP  *http.Client
	Proxy http.RoundTripper
	// Images is the image store the nodes share (nil: none): a start or
	// restore of an image whose node is lost fails at once when the store
	// does not hold the image (movable).
	Images control.ImageDurability
	Logger *slog.Logger
}

// Router is the control plane's control.Node for many nodes: a create goes
// where Place says, everything else to the node the sandbox (or the
// snapshot's sandbox) lives on. State is read from the shared database.
type Router struct {
	o       Options
	log     *slog.Logger
	mu      sync.Mutex
	clients map[string]*nodeapi.RemoteNode // by node id, URL and protocol
}

// NewRouter makes a Router.
func NewRouter(o Options) *Router {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Proxy == nil {
		o.Proxy = http.DefaultTransport
	}
	if o.LostAfter <= 0 {
		o.LostAfter = DefaultLostAfter
	}
	return &Router{o: o, log: o.Logger, clients: map[string]*nodeapi.RemoteNode{}}
}

// DefaultLostAfter is ZEISH_NODE_LOST_AFTER's default.
const DefaultLostAfter = 30 * time.Second

func (r *Router) client(n store.NodeRecord) *nodeapi.RemoteNode {
	key := n.ID + " " + n.URL + " " + n.Protocol
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clients[key]
	if c == nil {
		c = nodeapi.NewRemoteNode(n.ID, n.URL, CallKey(r.o.Key, n.ID), nodeapi.ParseMinor(n.Protocol), r.o.HTTP)
		// A node of 2.3 reaches rows through the control plane: the
		// operations that need another node's row, or a new one, lend it.
		id := n.ID
		c.SetGrants(func(ids ...string) []*nodev2.Grant {
			out := make([]*nodev2.Grant, len(ids))
			for i, sb := range ids {
				out[i] = GrantFor(r.o.Key, id, sb, GrantTTL)
			}
			return out
		})
		r.clients[key] = c
	}
	return c
}

// node is the live node named id.
func (r *Router) node(ctx context.Context, id string) (store.NodeRecord, *nodeapi.RemoteNode, error) {
	n, err := r.o.Nodes.GetNode(ctx, id)
	if err != nil {
		if errdefs.Is(err, errdefs.ClassNotFound) {
			return n, nil, fmt.Errorf("node %s is not registered: %w", id, errdefs.ErrUnavailable)
		}
		return n, nil, fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	if !Live(n, time.Now(), r.o.LostAfter) {
		return n, nil, fmt.Errorf("node %s has not answered since %s: %w", id, n.HeartbeatAt.Format(time.RFC3339), errdefs.ErrUnavailable)
	}
	return n, r.client(n), nil
}

// of is the node of sandbox id.
func (r *Router) of(ctx context.Context, id string) (store.NodeRecord, *nodeapi.RemoteNode, error) {
	_, n, c, err := r.sandboxOn(ctx, id)
	return n, c, err
}

// sandboxOn is sandbox id and its node.
func (r *Router) sandboxOn(ctx context.Context, id string) (*store.SandboxRecord, store.NodeRecord, *nodeapi.RemoteNode, error) {
	rec, err := r.o.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, store.NodeRecord{}, nil, err
	}
	n, c, err := r.node(ctx, rec.Host)
	return rec, n, c, err
}

// ofSnapshot is the sandbox snapshot id was taken of and its node (the
// snapshot's image lives there).
func (r *Router) ofSnapshot(ctx context.Context, id string) (*store.SandboxRecord, store.NodeRecord, *nodeapi.RemoteNode, error) {
	s, err := r.o.Store.GetSnapshot(ctx, id)
	if err != nil {
		return nil, store.NodeRecord{}, nil, err
	}
	return r.sandboxOn(ctx, s.SandboxID)
}

// seal gives new sandbox rec the id it will have and the sealed form of
// env, its secrets, for the row its node writes: nodes hold no secrets
// key, so the control plane chooses the id and seals for it.
func (r *Router) seal(rec *store.SandboxRecord, env map[string]string) error {
	if rec.ID == "" {
		rec.ID = sandbox.NewID(sandbox.PrefixSandbox)
	}
	rec.SecretEnv = env
	if len(env) == 0 {
		return nil
	}
	sealed, err := r.o.Secrets.Seal(rec.ID, env)
	if err != nil {
		return err
	}
	rec.SetSealedSecrets(sealed)
	return nil
}

// sealChildren prepares the children of a fork, which inherit secrets.
func (r *Router) sealChildren(children []*store.SandboxRecord, secrets map[string]string) error {
	for _, c := range children {
		if err := r.seal(c, secrets); err != nil {
			return err
		}
	}
	return nil
}

// Region is empty: the cluster has many (HasRegion says which exist).
func (r *Router) Region() string { return "" }

// HasRegion reports whether a registered node serves region.
func (r *Router) HasRegion(ctx context.Context, region string) (bool, error) {
	nodes, err := r.o.Nodes.ListNodes(ctx)
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		if n.Region == region {
			return true, nil
		}
	}
	return false, nil
}

// Capabilities are the control plane's: no VMM of its own (each node
// reports its own in its heartbeat).
func (r *Router) Capabilities() vmm.Capabilities {
	return vmm.Capabilities{Name: "none", Accel: "none", AccelReason: "a control plane: sandboxes run on its node agents"}
}

// Nodes with their memory committed as the database has it now (a
// heartbeat lags: two creates in a row must see each other).
func (r *Router) Nodes(ctx context.Context) ([]store.NodeRecord, error) {
	nodes, err := r.o.Nodes.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := r.o.Store.ListSandboxes(ctx, store.SandboxFilter{States: sandbox.MemoryStates})
	if err != nil {
		return nil, err
	}
	used := map[string]int{}
	for _, s := range rows {
		used[s.Host] += s.MemoryMiB
	}
	for i := range nodes {
		nodes[i].Capacity.MemoryCommittedMiB = used[nodes[i].ID]
	}
	return nodes, nil
}

// Create places r on the best node (Place); a node that turns out full
// meanwhile passes it to the next.
func (r *Router) Create(ctx context.Context, rec *store.SandboxRecord) (*store.SandboxRecord, error) {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	want := Want{Region: rec.Region, Accel: rec.Accel, Labels: rec.NodeLabels, MemoryMiB: rec.MemoryMiB}
	// A template built in the cluster is on the node that built it, and
	// in the image store for the nodes of protocol 2.2, which fetch it
	// (a node without the store refuses, and the next is asked).
	holder := ""
	if t, err := r.o.Store.GetTemplate(ctx, rec.Template); err == nil {
		holder = t.Host
	}
	order, err := Place(nodes, want, time.Now(), r.o.LostAfter)
	if err != nil {
		return nil, err
	}
	if holder != "" {
		order = slices.DeleteFunc(order, func(n store.NodeRecord) bool {
			return n.ID != holder && nodeapi.ParseMinor(n.Protocol) < nodeapi.MinorImages
		})
		if len(order) == 0 {
			return nil, fmt.Errorf("the template is held by node %s, which is not live with room, and no node of protocol %s that could fetch it has %d MiB free: %w",
				holder, nodeapi.Format(nodeapi.ProtocolMajor, nodeapi.MinorImages), rec.MemoryMiB, errdefs.ErrNodeFull)
		}
	}
	if err := r.seal(rec, rec.SecretEnv); err != nil {
		return nil, err
	}
	for i, n := range order {
		made, err := r.client(n).Create(ctx, rec)
		if err == nil || i == len(order)-1 || !(errdefs.Of(err) == errdefs.ErrNodeFull || errdefs.Of(err) == errdefs.ErrStorageFull || errdefs.Of(err) == errdefs.ErrUnavailable) {
			if err == nil {
				r.log.Info("placed", "sandbox", made.ID, "node", n.ID, "free_mib", n.Capacity.FreeMiB())
			}
			return made, err
		}
		r.log.Info("placement: node refused, trying the next", "node", n.ID, "err", err)
	}
	panic("unreachable")
}

// Clone forks on the parent's node (its memory image is there); a node
// that is draining takes no new sandboxes, forks included.
func (r *Router) Clone(ctx context.Context, parentID string, children []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	parent, n, c, err := r.sandboxOn(ctx, parentID)
	if err != nil {
		return 0, nil, err
	}
	if n.Draining {
		return 0, nil, fmt.Errorf("node %s of sandbox %s is draining: %w", n.ID, parentID, errdefs.ErrNodeFull)
	}
	if err := r.sealChildren(children, parent.SecretEnv); err != nil {
		return 0, nil, err
	}
	return c.Clone(ctx, parentID, parent.SecretEnv, children)
}

func (r *Router) CreateSnapshot(ctx context.Context, id, name string) (*store.SnapshotRecord, error) {
	_, c, err := r.of(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.CreateSnapshot(ctx, id, name)
}

// DeleteSnapshot deletes a snapshot on its sandbox's node; when that node
// is lost, in the records only (its image there goes if it comes back,
// and the image store's sweep takes its copy in the store).
func (r *Router) DeleteSnapshot(ctx context.Context, id string) error {
	rec, _, c, err := r.ofSnapshot(ctx, id)
	if err != nil {
		if rec != nil && r.lost(ctx, rec.Host) {
			r.log.Warn("snapshot deleted while its node is lost", "snapshot", id, "node", rec.Host)
			return r.o.Store.DeleteSnapshot(ctx, id)
		}
		return err
	}
	return c.DeleteSnapshot(ctx, id)
}

func (r *Router) call(ctx context.Context, id string, f func(*nodeapi.RemoteNode) (*store.SandboxRecord, error)) (*store.SandboxRecord, error) {
	_, c, err := r.of(ctx, id)
	if err != nil {
		return nil, err
	}
	return f(c)
}

func (r *Router) Stop(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) { return c.Stop(ctx, id) })
}
func (r *Router) StopReason(ctx context.Context, id, reason string) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) { return c.StopReason(ctx, id, reason) })
}
func (r *Router) Pause(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) { return c.Pause(ctx, id) })
}
func (r *Router) Resume(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) { return c.Resume(ctx, id) })
}

// Delete deletes a sandbox on its node; when that node is lost, in the
// records only (forget).
func (r *Router) Delete(ctx context.Context, id string) (*store.SandboxRecord, error) {
	rec, _, c, err := r.sandboxOn(ctx, id)
	if err != nil {
		if rec != nil && r.lost(ctx, rec.Host) {
			return r.forget(ctx, id, rec.Host)
		}
		return nil, err
	}
	return c.Delete(ctx, id)
}
func (r *Router) SetPortPublic(ctx context.Context, id string, port int, public bool) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) {
		return c.SetPortPublic(ctx, id, port, public)
	})
}
func (r *Router) SetNetwork(ctx context.Context, id string, p sandbox.Network) (*store.SandboxRecord, error) {
	return r.call(ctx, id, func(c *nodeapi.RemoteNode) (*store.SandboxRecord, error) { return c.SetNetwork(ctx, id, p) })
}

// waitPoll is how often Wait reads a sandbox from the database.
const waitPoll = 200 * time.Millisecond

// Wait asks the sandbox's node to wait (it wakes at the change itself);
// when the node does not answer it reads the database until the sandbox
// settles or reaches want: a lost node's sandboxes are settled by the
// control plane (node_lost).
func (r *Router) Wait(ctx context.Context, id string, want sandbox.State) (*store.SandboxRecord, error) {
	if _, c, err := r.of(ctx, id); err == nil {
		rec, err := c.Wait(ctx, id, want)
		if err == nil || !errdefs.Is(err, errdefs.ClassUnavailable) || errdefs.Of(err) == errdefs.ErrTimeout {
			return rec, err
		}
	}
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		rec, err := r.o.Store.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		if sandbox.WaitOver(rec.State, want) {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("sandbox %s is still %s: %w", id, rec.State, errdefs.ErrTimeout)
		case <-t.C:
		}
	}
}

// Changed is closed after a poll interval: the caller reads the database
// again (changes happen on the nodes, and the caller compares).
func (r *Router) Changed(string) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(waitPoll, func() { close(ch) })
	return ch
}

// Agent: the data plane is the node's own, at the URL /access returns.
func (r *Router) Agent(_ context.Context, rec *store.SandboxRecord) (*guest.Client, error) {
	return nil, fmt.Errorf("sandbox %s is served by the data plane of its node %s: use the URL /access returns: %w", rec.ID, rec.Host, errdefs.ErrInvalidArgument)
}

// PortAddr: ports are served by the sandbox's node too.
func (r *Router) PortAddr(rec *store.SandboxRecord, _ int) (string, error) {
	return "", fmt.Errorf("sandbox %s's ports are served by its node %s: %w", rec.ID, rec.Host, errdefs.ErrInvalidArgument)
}

// NetBytes asks the sandbox's node, and falls back on the stored counters
// when it does not answer quickly.
func (r *Router) NetBytes(rec *store.SandboxRecord) (in, out uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, c, err := r.node(ctx, rec.Host); err == nil {
		if in, out, err := c.NetBytes(ctx, rec.ID); err == nil {
			return in, out
		}
	}
	return rec.NetIn, rec.NetOut
}

// DataURL is the base of sandbox rec's data plane, on its node.
func (r *Router) DataURL(ctx context.Context, rec *store.SandboxRecord) (string, error) {
	n, _, err := r.node(ctx, rec.Host)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(n.URL, "/") + api.DataPath + "/sandboxes/" + rec.ID, nil
}

// Live reports whether n heartbeated within LostAfter.
func (r *Router) Live(n store.NodeRecord) bool { return Live(n, time.Now(), r.o.LostAfter) }

// Drain sets whether node id takes new sandboxes (its own keep running).
func (r *Router) Drain(ctx context.Context, id string, drain bool) (store.NodeRecord, error) {
	return Drain(ctx, r.o.Nodes, id, drain)
}
