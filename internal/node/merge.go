package node

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Bounded disk chains. Every capture freezes a sandbox's disk as an image's
// layer and puts the sandbox on a new overlay over it; a fork child starts
// on an overlay over the same layer. So a sandbox forked again and again,
// or a child of a child of a child, stands on one more layer each time, and
// each layer costs its VMM ~1–2 ms inside the pause of the next capture
// (QEMU reopens every layer at the switch-over).
//
// Once a running sandbox stands on more than Options.DiskLayers frozen
// layers, the node merges them in the background into one new layer over
// the template's disk (vmm.Driver.MergeLayers: frozen layers never change,
// so no VM waits) and then, as the sandbox's operation, moves its VM onto
// the merge (Driver.Rebase: no pause). Siblings standing on the same top
// layer (a fork's children and its parent) share one merge. The merge is
// an image of its own, holding only a disk layer, which gc keeps while a
// record lists it.
//
// Crash safety: the sandbox's record lists the merge beside its old layers
// before the VM moves, and loses the old ones only after, so a crash at any
// point leaves every layer its disk may name; a merge no record lists yet
// is an image folder gc removes.

// merger runs merges one at a time: each reads and writes whole layers.
type merger struct {
	n    *Node
	kick chan struct{}

	mu     sync.Mutex
	queue  []string          // sandbox ids
	merged map[string]string // frozen top layer's image → its merge's image
	// failed are the sandbox, top layer pairs whose merge or rebase failed:
	// not tried again until the sandbox stands on another top.
	failed map[[2]string]bool
	loaded bool // merged holds the merges on disk too
}

func newMerger(n *Node) *merger {
	return &merger{n: n, kick: make(chan struct{}, 1), merged: map[string]string{}, failed: map[[2]string]bool{}}
}

// mergeLater queues sandbox id for a merge of its layers if it runs on more
// than the node allows.
func (n *Node) mergeLater(id string, layers int) {
	if n.opts.DiskLayers <= 0 || layers <= n.opts.DiskLayers {
		return
	}
	m := n.merger
	m.mu.Lock()
	if !slices.Contains(m.queue, id) {
		m.queue = append(m.queue, id)
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// loop merges queued sandboxes until the node closes.
func (m *merger) loop() {
	defer m.n.wg.Done()
	for {
		select {
		case <-m.n.life.Done():
			return
		case <-m.kick:
		}
		for {
			m.mu.Lock()
			if len(m.queue) == 0 {
				m.mu.Unlock()
				break
			}
			id := m.queue[0]
			m.queue = m.queue[1:]
			m.mu.Unlock()
			if err := m.mergeOne(m.n.life, id); err != nil && m.n.life.Err() == nil {
				m.n.log.Warn("merge disk layers", logSandbox, id, "err", err)
			}
		}
		m.n.images.Collect(m.n.life) // the layers the sandboxes left may be nobody's now
	}
}

// mergeOne merges the layers sandbox id stands on and moves its VM onto
// the merge.
func (m *merger) mergeOne(ctx context.Context, id string) error {
	n := m.n
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil || len(r.Layers) <= n.opts.DiskLayers || r.Host != n.opts.ID {
		return nil // gone, or merged meanwhile
	}
	if h, _ := r.VMHandle(); h == nil {
		return nil // stopped: its next start stands on its layers anew
	}
	top := r.Layers[len(r.Layers)-1]
	key := [2]string{id, top}
	m.mu.Lock()
	failed := m.failed[key]
	m.mu.Unlock()
	if failed {
		return nil
	}
	err = m.mergeOnto(ctx, r, top)
	if err != nil {
		m.mu.Lock()
		m.failed[key] = true
		m.mu.Unlock()
	}
	return err
}

// mergeOnto merges the chain under top, sandbox r's top layer, or finds
// its merge, and moves r's VM onto it.
func (m *merger) mergeOnto(ctx context.Context, r *store.SandboxRecord, top string) error {
	n, id := m.n, r.ID
	var merged string
	var lease *images.Lease
	if meta, err := n.images.Read(top); err == nil && meta.MergedFrom != "" {
		// A crash cut a rebase short: the record lists the merge after the
		// layers it replaces, and the overlay names one or the other.
		merged, lease = top, n.images.Lease(top)
	} else {
		var err error
		if merged, lease, err = m.mergeOf(ctx, id, top, r.Layers[0]); err != nil || merged == "" {
			return err
		}
	}
	defer lease.Release()
	return n.do(ctx, id, func(ctx context.Context) error { return n.rebase(ctx, id, top, merged) })
}

// mergeOf returns the merge of the chain under layer top (down to the
// backing of its bottom layer, the template's disk), making it if no
// sibling did: "" if the chain has nothing to merge into. The merge is
// leased until the caller releases lease.
func (m *merger) mergeOf(ctx context.Context, sandboxID, top, bottom string) (merged string, lease *images.Lease, err error) {
	n := m.n
	m.loadMerged()
	m.mu.Lock()
	merged = m.merged[top]
	m.mu.Unlock()
	if merged != "" {
		lease = n.images.Lease(merged)
		if meta, err := n.images.Read(merged); err == nil && meta.Disk != "" {
			return merged, lease, nil
		}
		lease.Release() // collected since
	}
	topMeta, err := n.images.Read(top)
	if err != nil || topMeta.Disk == "" {
		return "", nil, err
	}
	bottomMeta, err := n.images.Read(bottom)
	if err != nil || bottomMeta.Disk == "" {
		return "", nil, err
	}
	base, err := n.opts.Driver.DiskBacking(bottomMeta.Disk)
	if err != nil || base == "" {
		return "", nil, err
	}
	id, dir, lease, err := n.images.Create()
	if err != nil {
		return "", nil, err
	}
	began := time.Now()
	meta := &images.Meta{ID: id, SandboxID: sandboxID, Disk: n.images.LayerPath(id), MergedFrom: top, CreatedAt: began.UTC()}
	if err := n.opts.Driver.MergeLayers(ctx, topMeta.Disk, base, meta.Disk); err != nil {
		lease.Release()
		os.RemoveAll(dir)
		return "", nil, err
	}
	if err := n.images.Write(meta); err != nil {
		lease.Release()
		os.RemoveAll(dir)
		return "", nil, err
	}
	size, _ := sparsecopy.Allocated(meta.Disk)
	n.log.Info("disk layers merged", logSandbox, sandboxID, "layer", top, "image", id,
		"merge_ms", time.Since(began).Milliseconds(), "bytes", size)
	m.mu.Lock()
	m.merged[top] = id
	m.mu.Unlock()
	return id, lease, nil
}

// loadMerged fills the map of merges from the images on disk, once: a
// restarted node still shares the merges it made before.
func (m *merger) loadMerged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loaded {
		return
	}
	m.loaded = true
	entries, _ := os.ReadDir(m.n.images.Root())
	for _, e := range entries {
		if meta, err := m.n.images.Read(e.Name()); err == nil && meta.MergedFrom != "" {
			m.merged[meta.MergedFrom] = meta.ID
		}
	}
}

// rebase moves sandbox id's VM onto merged, the merge of the chain under
// its top layer top, if it still stands on top. Runs as its operation.
func (n *Node) rebase(ctx context.Context, id, top, merged string) error {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil
	}
	// A VM a capture could take now (running or paused) may be moved.
	h, err := r.VMHandle()
	if _, refused := sandbox.NextFor(id, r.State, sandbox.OpClone); refused != nil || err != nil || h == nil ||
		len(r.Layers) == 0 || r.Layers[len(r.Layers)-1] != top {
		return nil // stopped, failed or captured since
	}
	// The record names the merge beside the old layers first: until the
	// VM's overlay is rebased it may name either.
	old := r.Layers
	if top != merged {
		r.Layers = append(slices.Clip(old), merged)
		if err := n.saveVM(ctx, r, h); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := n.opts.Driver.Rebase(ctx, h, n.images.LayerPath(merged)); err != nil {
		// The overlay still names its old chain (its header is the last
		// thing Rebase changes).
		if top != merged {
			r.Layers = old
			err = errors.Join(err, n.saveVM(ctx, r, h))
		}
		return err
	}
	dropped := len(r.Layers) - 1
	r.Layers = []string{merged}
	if err := n.saveVM(ctx, r, h); err != nil {
		return err
	}
	n.log.Info("disk rebased", logSandbox, id, "image", merged, "layers_dropped", dropped,
		"rebase_ms", time.Since(began).Milliseconds())
	return nil
}
