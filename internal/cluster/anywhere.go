package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/store"
)

// With an image store shared by the nodes (ZEISH_IMAGE_STORE on each), an
// image is not tied to the node that made it: a start of a stopped
// sandbox, a restore and a snapshot's clones go to a node with room,
// preferring the node that holds the image (home), and a fork may put the
// children that do not fit beside their parent on other nodes (CloneAny).
// Only nodes of protocol 2.2 (nodeapi.MinorImages) fetch images from the
// store: an older node is asked only about what it holds.

// Placements of a fork's children (api: placement).
const (
	PlaceParent = "parent" // all on the parent's node, or node_full
	PlaceAny    = "any"    // those that do not fit there on other nodes
)

// startOn orders the nodes sandbox rec may start on from an image that
// node home holds: home first when it is live, not draining and has room
// for need MiB, then the nodes of protocol 2.2 with room, most free memory
// first.
func (r *Router) startOn(ctx context.Context, rec *store.SandboxRecord, home string, need int) ([]store.NodeRecord, error) {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	want := Want{Region: rec.Region, Accel: rec.Accel, Labels: rec.NodeLabels, MemoryMiB: need}
	order, err := Place(nodes, want, time.Now(), r.o.LostAfter)
	if err != nil {
		return nil, fmt.Errorf("%w (the image is on node %s)", err, home)
	}
	var out []store.NodeRecord
	for _, n := range order {
		if n.ID == home {
			out = append([]store.NodeRecord{n}, out...)
		} else if nodeapi.ParseMinor(n.Protocol) >= nodeapi.MinorImages {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("node %s, which holds the image, is lost, draining or full, and no other node of protocol %s has %d MiB free: %w",
			home, nodeapi.Format(nodeapi.ProtocolMajor, nodeapi.MinorImages), need, errdefs.ErrNodeFull)
	}
	return out, nil
}

// movable refuses at once to start image (what it is: "the saved state
// of sandbox X", "the image of snapshot Y") away from node home when home
// is lost and the image store does not hold the image whole: its upload
// had not finished, and no node could fetch it. Without the check, the
// node asked would wait ZEISH_IMAGE_FETCH_WAIT for an upload nobody runs.
// While home is live its upload may still finish, and home is asked
// first anyway; when the store cannot say, the node asked decides (within
// its bounded wait). The error is not_found, the code the node's wait
// ended in before, with a message a client sees (a 5xx's is hidden): if
// home comes back, its image is there again (and its upload resumes).
func (r *Router) movable(ctx context.Context, home, image, what string) error {
	if r.o.Images == nil || image == "" {
		return nil
	}
	n, err := r.o.Nodes.GetNode(ctx, home)
	if err == nil && Live(n, time.Now(), r.o.LostAfter) {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	durable, derr := r.o.Images.Durable(dctx, image)
	if derr != nil {
		r.log.Warn("image store: cannot say whether an image of a lost node is durable; the node asked will wait for it", "image", image, "err", derr)
		return nil
	}
	if durable {
		return nil
	}
	since := "it is not registered"
	if err == nil {
		since = "its last heartbeat was at " + n.HeartbeatAt.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%s was not yet durable in the image store when node %s was lost (%s): it can start again only if node %s comes back: %w",
		what, home, since, home, errdefs.ErrNotFound)
}

// elsewhere reports whether a node's refusal lets the next node try.
func elsewhere(err error) bool {
	switch errdefs.Of(err) {
	case errdefs.ErrNodeFull, errdefs.ErrStorageFull, errdefs.ErrUnavailable:
		return true
	}
	return false
}

// tryOn calls f on each node of order until one takes it.
func tryOn[T any](r *Router, order []store.NodeRecord, what string, f func(store.NodeRecord, *nodeapi.RemoteNode) (T, error)) (T, error) {
	var zero T
	var err error
	for i, n := range order {
		var out T
		out, err = f(n, r.client(n))
		if err == nil {
			if i > 0 || len(order) > 1 {
				r.log.Info("placed "+what, "node", n.ID, "tried", i+1)
			}
			return out, nil
		}
		if !elsewhere(err) {
			return zero, err
		}
		r.log.Info("placement: node refused "+what+", trying the next", "node", n.ID, "err", err)
	}
	return zero, err
}

// Start starts a stopped sandbox on its node, or, when that node is lost,
// draining or full, on another that fetches its image from the store. The
// node delivers its secrets to the guest again.
func (r *Router) Start(ctx context.Context, id string) (*store.SandboxRecord, error) {
	rec, err := r.o.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := r.movable(ctx, rec.Host, rec.ResumeImage, "the saved state of sandbox "+rec.ID); err != nil {
		return nil, err
	}
	order, err := r.startOn(ctx, rec, rec.Host, rec.MemoryMiB)
	if err != nil {
		return nil, err
	}
	return tryOn(r, order, "a start", func(_ store.NodeRecord, c *nodeapi.RemoteNode) (*store.SandboxRecord, error) {
		return c.Start(ctx, id, rec.SecretEnv)
	})
}

// Restore rolls the snapshot's sandbox back on its node, or, when that
// node is lost, on another that fetches the snapshot's image: the sandbox
// comes back there (its running memory was lost with its node). The node
// delivers the sandbox's secrets to the guest again.
func (r *Router) Restore(ctx context.Context, snapID string) (*store.SnapshotRecord, *store.SandboxRecord, error) {
	snap, err := r.o.Store.GetSnapshot(ctx, snapID)
	if err != nil {
		return nil, nil, err
	}
	rec, err := r.o.Store.GetSandbox(ctx, snap.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if _, c, err := r.node(ctx, rec.Host); err == nil {
		// Its node is live: the sandbox's VM (or files) are there.
		return c.Restore(ctx, snapID, rec.ID, rec.SecretEnv)
	}
	if err := r.movable(ctx, rec.Host, snap.Image, "the image of snapshot "+snap.ID); err != nil {
		return nil, nil, err
	}
	order, err := r.startOn(ctx, rec, rec.Host, rec.MemoryMiB)
	if err != nil {
		return nil, nil, err
	}
	type restored struct {
		snap *store.SnapshotRecord
		rec  *store.SandboxRecord
	}
	out, err := tryOn(r, order, "a restore", func(_ store.NodeRecord, c *nodeapi.RemoteNode) (restored, error) {
		if err := c.Needs(nodeapi.MinorImages, "a restore away from the sandbox's node"); err != nil {
			return restored{}, err
		}
		s, sb, err := c.Restore(ctx, snapID, rec.ID, rec.SecretEnv)
		return restored{s, sb}, err
	})
	return out.snap, out.rec, err
}

// CloneSnapshot starts children on the node that keeps the snapshot when
// it has room for them all, else on another node that fetches the image.
func (r *Router) CloneSnapshot(ctx context.Context, snapID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	parent, snap, _, err := r.ofSnapshotRecord(ctx, snapID)
	if err != nil {
		return nil, err
	}
	if err := r.movable(ctx, parent.Host, snap.Image, "the image of snapshot "+snap.ID); err != nil {
		return nil, err
	}
	if err := r.sealChildren(children, parent.SecretEnv); err != nil {
		return nil, err
	}
	order, err := r.startOn(ctx, parent, parent.Host, parent.MemoryMiB*len(children))
	if err != nil {
		return nil, err
	}
	return tryOn(r, order, "a snapshot's clones", func(_ store.NodeRecord, c *nodeapi.RemoteNode) ([]*store.SandboxRecord, error) {
		return c.CloneSnapshot(ctx, snapID, parent.ID, parent.SecretEnv, children)
	})
}

// ofSnapshotRecord is the sandbox snapshot id was taken of (its node may
// be lost: the records are enough to place the snapshot elsewhere).
func (r *Router) ofSnapshotRecord(ctx context.Context, id string) (*store.SandboxRecord, *store.SnapshotRecord, string, error) {
	s, err := r.o.Store.GetSnapshot(ctx, id)
	if err != nil {
		return nil, nil, "", err
	}
	rec, err := r.o.Store.GetSandbox(ctx, s.SandboxID)
	if err != nil {
		return nil, nil, "", err
	}
	return rec, s, rec.Host, nil
}

// CloneAny forks parentID as Clone does, with placement: PlaceParent puts
// every child on the parent's node (node_full when they do not fit);
// PlaceAny puts there as many as fit (at least one: the fork's image is
// captured there) and the rest on other nodes of protocol 2.2, which start
// them from the fork's image once its upload to the image store is done
// (they wait for it: docs/images.md says why not from the parent's node).
func (r *Router) CloneAny(ctx context.Context, parentID string, children []*store.SandboxRecord, placement string) (time.Duration, []*store.SandboxRecord, error) {
	if placement == "" || placement == PlaceParent {
		return r.Clone(ctx, parentID, children)
	}
	if placement != PlaceAny {
		return 0, nil, fmt.Errorf("placement %q: want %q or %q: %w", placement, PlaceParent, PlaceAny, errdefs.ErrInvalidArgument)
	}
	parent, home, c, err := r.sandboxOn(ctx, parentID)
	if err != nil {
		return 0, nil, err
	}
	if home.Draining {
		return 0, nil, fmt.Errorf("node %s of sandbox %s is draining: %w", home.ID, parentID, errdefs.ErrNodeFull)
	}
	local := len(children)
	if free := r.freeOn(ctx, home.ID); free >= 0 && parent.MemoryMiB > 0 {
		local = min(local, free/parent.MemoryMiB)
	}
	if local == 0 {
		return 0, nil, fmt.Errorf("node %s of sandbox %s has no room for one child (%d MiB), and a fork's image is captured beside its parent: %w",
			home.ID, parentID, parent.MemoryMiB, errdefs.ErrNodeFull)
	}
	if err := r.sealChildren(children, parent.SecretEnv); err != nil {
		return 0, nil, err
	}
	// Where the rest go, decided before the parent pauses: all or none.
	rest := children[local:]
	plan, err := r.spread(ctx, parent, home.ID, len(rest))
	if err != nil {
		return 0, nil, err
	}
	pause, made, err := c.Clone(ctx, parentID, parent.SecretEnv, children[:local])
	if err != nil || len(rest) == 0 {
		return pause, made, err
	}
	image, err := r.forkImage(ctx, made[0].ID)
	if err != nil {
		return pause, made, err
	}
	// The other nodes start their shares at once, each fetching the image.
	type started struct {
		children []*store.SandboxRecord
		err      error
	}
	out := make([]started, len(plan))
	var wg sync.WaitGroup
	next := 0
	for i, p := range plan {
		kids := rest[next : next+p.count]
		next += p.count
		wg.Go(func() {
			more, err := r.client(p.node).CloneImage(ctx, image, parentID, parent.SecretEnv, kids)
			if err != nil {
				err = fmt.Errorf("node %s: %w", p.node.ID, err)
			}
			out[i] = started{more, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, o := range out {
		made = append(made, o.children...)
		if o.err != nil {
			errs = append(errs, o.err)
		}
	}
	if len(errs) > 0 {
		// The children started run; the caller sees which.
		return pause, made, fmt.Errorf("%d of %d children started: %w", len(made), len(children), errors.Join(errs...))
	}
	return pause, made, nil
}

// share is how many of a fork's children one node takes.
type share struct {
	node  store.NodeRecord
	count int
}

// spread places n children of parent on nodes other than home, of
// protocol 2.2, filling the node with the most free memory first.
func (r *Router) spread(ctx context.Context, parent *store.SandboxRecord, home string, n int) ([]share, error) {
	if n == 0 {
		return nil, nil
	}
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	want := Want{Region: parent.Region, Accel: parent.Accel, Labels: parent.NodeLabels, MemoryMiB: parent.MemoryMiB}
	order, _ := Place(nodes, want, time.Now(), r.o.LostAfter)
	order = slices.DeleteFunc(order, func(nr store.NodeRecord) bool {
		return nr.ID == home || nodeapi.ParseMinor(nr.Protocol) < nodeapi.MinorImages
	})
	var plan []share
	left := n
	for _, nr := range order {
		fit := left
		if free := nr.Capacity.FreeMiB(); free >= 0 && parent.MemoryMiB > 0 {
			fit = min(left, free/parent.MemoryMiB)
		}
		if fit > 0 {
			plan = append(plan, share{nr, fit})
			left -= fit
		}
		if left == 0 {
			return plan, nil
		}
	}
	return nil, fmt.Errorf("%d of the children fit on no node of protocol %s beside the parent's: %w",
		left, nodeapi.Format(nodeapi.ProtocolMajor, nodeapi.MinorImages), errdefs.ErrNodeFull)
}

// freeOn is node id's free memory as the database has it now (-1: no limit).
func (r *Router) freeOn(ctx context.Context, id string) int {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return 0
	}
	for _, n := range nodes {
		if n.ID == id {
			return n.Capacity.FreeMiB()
		}
	}
	return 0
}

// forkImage is the image a fork child was started from: the top of its
// disk chain (node.startChildren).
func (r *Router) forkImage(ctx context.Context, child string) (string, error) {
	rec, err := r.o.Store.GetSandbox(ctx, child)
	if err != nil {
		return "", err
	}
	if len(rec.Layers) == 0 {
		return "", fmt.Errorf("fork child %s names no image: %w", child, errdefs.ErrInternal)
	}
	return rec.Layers[len(rec.Layers)-1], nil
}
