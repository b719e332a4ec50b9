// Package merge bounds the disk chains of a node's running sandboxes.
//
// Every capture freezes a sandbox's disk as an image's layer and puts the
// sandbox on a new overlay over it; a fork child starts on an overlay over
// the same layer. So a sandbox forked again and again, or a child of a
// child of a child, stands on one more layer each time, and each layer
// costs its VMM ~1–2 ms inside the pause of the next capture (QEMU reopens
// every layer at the switch-over).
//
// Once a running sandbox stands on more than Options.MaxLayers frozen
// layers, the Merger merges them in the background into one new layer over
// the template's disk (Driver.MergeLayers: frozen layers never change, so
// no VM waits) and then has the node move the sandbox's VM onto the merge
// (Sandboxes.Rebase: no pause). Siblings standing on the same top layer (a
// fork's children and its parent) share one merge. The merge is an image
// of its own, holding only a disk layer, which gc keeps while a record
// lists it.
//
// Crash safety: the node lists the merge in the sandbox's record beside
// its old layers before the VM moves, and drops the old ones only after,
// so a crash at any point leaves every layer its disk may name; a merge no
// record lists yet is an image folder gc removes.
package merge

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/sparsecopy"
)

// Driver is what a merge needs of the VMM driver.
type Driver interface {
	// DiskBacking is the file a disk layer is backed by ("" for none).
	DiskBacking(path string) (string, error)
	// MergeLayers writes out, one layer backed by base with the content of
	// the chain from top down to base.
	MergeLayers(ctx context.Context, top, base, out string) error
}

// Sandboxes is what the merger needs of the node that runs them.
type Sandboxes interface {
	// Layers is the chain of images sandbox id's running VM stands on,
	// bottom first; nil when the sandbox is gone, stopped (its next start
	// stands on its layers anew) or on another node.
	Layers(ctx context.Context, id string) []string
	// Rebase moves sandbox id's VM onto merged, the merge of the chain
	// under its top layer top, if it still stands on top; it runs as the
	// sandbox's operation.
	Rebase(ctx context.Context, id, top, merged string) error
}

// Options configure a Merger.
type Options struct {
	// MaxLayers is how many frozen layers a running sandbox's disk may
	// stand on before its layers are merged. 0: never.
	MaxLayers int
	Images    *images.Store
	Driver    Driver
	Sandboxes Sandboxes
	Logger    *slog.Logger
}

// Merger runs merges one at a time: each reads and writes whole layers.
type Merger struct {
	opts Options
	log  *slog.Logger
	kick chan struct{}

	mu     sync.Mutex
	queue  []string          // sandbox ids
	merged map[string]string // frozen top layer's image → its merge's image
	// failed are the sandbox, top layer pairs whose merge or rebase failed:
	// not tried again until the sandbox stands on another top.
	failed map[[2]string]bool
	loaded bool // merged holds the merges on disk too
}

// New makes a merger; Run runs it.
func New(opts Options) *Merger {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Merger{opts: opts, log: opts.Logger, kick: make(chan struct{}, 1), merged: map[string]string{}, failed: map[[2]string]bool{}}
}

// Queue has sandbox id's layers merged if it stands on more than
// MaxLayers of them.
func (m *Merger) Queue(id string, layers int) {
	if m.opts.MaxLayers <= 0 || layers <= m.opts.MaxLayers {
		return
	}
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

// Run merges queued sandboxes until ctx ends.
func (m *Merger) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		m.drain(ctx)
	}
}

// drain merges every queued sandbox, then collects the layers they left.
func (m *Merger) drain(ctx context.Context) {
	for {
		m.mu.Lock()
		if len(m.queue) == 0 {
			m.mu.Unlock()
			break
		}
		id := m.queue[0]
		m.queue = m.queue[1:]
		m.mu.Unlock()
		if err := m.mergeOne(ctx, id); err != nil && ctx.Err() == nil {
			m.log.Warn("merge disk layers", "sandbox", id, "err", err)
		}
	}
	m.opts.Images.Collect(ctx) // the layers the sandboxes left may be nobody's now
}

// mergeOne merges the layers sandbox id stands on and moves its VM onto
// the merge.
func (m *Merger) mergeOne(ctx context.Context, id string) error {
	layers := m.opts.Sandboxes.Layers(ctx, id)
	if len(layers) <= m.opts.MaxLayers {
		return nil // gone, stopped, or merged meanwhile
	}
	top := layers[len(layers)-1]
	key := [2]string{id, top}
	m.mu.Lock()
	failed := m.failed[key]
	m.mu.Unlock()
	if failed {
		return nil
	}
	err := m.mergeOnto(ctx, id, layers)
	if err != nil {
		m.mu.Lock()
		m.failed[key] = true
		m.mu.Unlock()
	}
	return err
}

// mergeOnto merges the chain layers (sandbox id's) or finds its merge,
// and moves id's VM onto it.
func (m *Merger) mergeOnto(ctx context.Context, id string, layers []string) error {
	top := layers[len(layers)-1]
	var merged string
	var lease *images.Lease
	if meta, err := m.opts.Images.Read(top); err == nil && meta.MergedFrom != "" {
		// A crash cut a rebase short: the record lists the merge after the
		// layers it replaces, and the overlay names one or the other.
		merged, lease = top, m.opts.Images.Lease(top)
	} else {
		var err error
		if merged, lease, err = m.mergeOf(ctx, id, top, layers[0]); err != nil || merged == "" {
			return err
		}
	}
	defer lease.Release()
	return m.opts.Sandboxes.Rebase(ctx, id, top, merged)
}

// mergeOf returns the merge of the chain under layer top (down to the
// backing of its bottom layer, the template's disk), making it if no
// sibling did: "" if the chain has nothing to merge into. The merge is
// leased until the caller releases lease.
func (m *Merger) mergeOf(ctx context.Context, sandboxID, top, bottom string) (merged string, lease *images.Lease, err error) {
	imgs := m.opts.Images
	m.loadMerged()
	m.mu.Lock()
	merged = m.merged[top]
	m.mu.Unlock()
	if merged != "" {
		lease = imgs.Lease(merged)
		if meta, err := imgs.Read(merged); err == nil && meta.Disk != "" {
			return merged, lease, nil
		}
		lease.Release() // collected since
	}
	topMeta, err := imgs.Read(top)
	if err != nil || topMeta.Disk == "" {
		return "", nil, err
	}
	bottomMeta, err := imgs.Read(bottom)
	if err != nil || bottomMeta.Disk == "" {
		return "", nil, err
	}
	base, err := m.opts.Driver.DiskBacking(bottomMeta.Disk)
	if err != nil || base == "" {
		return "", nil, err
	}
	var (
		meta  *images.Meta
		began = time.Now()
	)
	err = rollback.Run(ctx,
		rollback.Step{Name: "image", Do: func(_ context.Context, undo *rollback.Stack) error {
			id, dir, l, err := imgs.Create()
			if err != nil {
				return err
			}
			lease = l
			undo.Add(func(context.Context) error { l.Release(); return os.RemoveAll(dir) })
			meta = &images.Meta{ID: id, SandboxID: sandboxID, Disk: imgs.LayerPath(id), MergedFrom: top, Template: bottomMeta.Template,
				CreatedAt: began.UTC()}
			return nil
		}},
		rollback.Step{Name: "merge", Do: func(ctx context.Context, _ *rollback.Stack) error {
			return m.opts.Driver.MergeLayers(ctx, topMeta.Disk, base, meta.Disk)
		}},
		rollback.Step{Name: "record", Do: func(context.Context, *rollback.Stack) error {
			if err := imgs.Write(meta); err != nil {
				return err
			}
			imgs.Publish(meta) // disks moved onto it go through it: others must find it
			return nil
		}},
	)
	if err != nil {
		return "", nil, err
	}
	size, _ := sparsecopy.Allocated(meta.Disk)
	m.log.Info("disk layers merged", "sandbox", sandboxID, "layer", top, "image", meta.ID,
		"merge_ms", time.Since(began).Milliseconds(), "bytes", size)
	m.mu.Lock()
	m.merged[top] = meta.ID
	m.mu.Unlock()
	return meta.ID, lease, nil
}

// loadMerged fills the map of merges from the images on disk, once: a
// restarted node still shares the merges it made before.
func (m *Merger) loadMerged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loaded {
		return
	}
	m.loaded = true
	for _, meta := range m.opts.Images.All() {
		if meta.MergedFrom != "" {
			m.merged[meta.MergedFrom] = meta.ID
		}
	}
}
