package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// With an image store (Options.ImageStore), this node also runs sandboxes
// whose images another node made: a stopped sandbox or a snapshot whose
// node is lost or full, a snapshot's clones, the children of a fork whose
// parent's node had no room for them. The images come from the store
// (images.Store.Fetch, with the disk chain below them); the sandbox's
// record moves here (takeOver). Only what was durable can move: an image
// still uploading when its node was lost is not in the store.

// image is image id whole (memory, state and disk) on this node, fetched
// from the image store when the node lacks it; sandboxes sbs (each being
// started from it) show the fetch's progress in their state_reason.
func (n *Node) image(ctx context.Context, id string, sbs ...string) (*images.Meta, error) {
	if m, err := n.images.ReadMachine(id); err == nil {
		return m, nil
	}
	if !n.images.HasRemote() {
		return nil, fmt.Errorf("image %s is not on host %s and no image store is set (ZEISH_IMAGE_STORE): %w", id, n.opts.ID, errdefs.ErrNotFound)
	}
	began := time.Now()
	m, err := n.images.Fetch(ctx, id, false, n.fetchProgressAll(ctx, id, sbs))
	if err != nil {
		return nil, err
	}
	if m.VM == nil || m.Disk == "" {
		return nil, fmt.Errorf("image %s in the image store holds no saved machine or no disk: %w", id, errdefs.ErrInternal)
	}
	n.log.Info("image fetched for a start here", "sandboxes", sbs, "image", id, "ms", time.Since(began).Milliseconds())
	return m, nil
}

// fetchProgress shows a fetch's progress as sandbox sb's state_reason
// ("fetching image (n/m MiB)"), which its events carry.
func (n *Node) fetchProgress(ctx context.Context, sb, image string) func(done, total int64) {
	if sb == "" {
		return nil
	}
	var mu sync.Mutex
	return func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		reason := fmt.Sprintf("fetching image %s (%d/%d MiB)", image, done>>20, (total+1<<20-1)>>20)
		n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), sb, func(r *store.SandboxRecord) error {
			if !sandbox.Allows(r.State, sandbox.OpReady) { // only while it starts
				return fmt.Errorf("sandbox %s is %s", sb, r.State)
			}
			r.StateReason, r.UpdatedAt = reason, time.Now().UTC()
			return nil
		})
		n.watch.notify(sb)
	}
}

// fetchProgressAll shows a fetch's progress on each of sandboxes sbs.
func (n *Node) fetchProgressAll(ctx context.Context, image string, sbs []string) func(done, total int64) {
	var each []func(done, total int64)
	for _, sb := range sbs {
		if p := n.fetchProgress(ctx, sb, image); p != nil {
			each = append(each, p)
		}
	}
	if len(each) == 0 {
		return nil
	}
	return func(done, total int64) {
		for _, p := range each {
			p(done, total)
		}
	}
}

// takeOver makes sandbox r, last run by another node, this node's: it
// will start from image meta (already here) on a fresh overlay of its
// layer, with an address of this node. The VM it had (on a node that is
// lost) is forgotten: its memory went with that node.
func (n *Node) takeOver(ctx context.Context, r *store.SandboxRecord, meta *images.Meta, resume bool) error {
	from := r.Host
	// Its kernel was at a path of its old node.
	if err := n.localKernel(ctx, r, r.ID); err != nil {
		return err
	}
	if n.links.Managed(r) {
		r.Address = ""
		if err := n.links.Assign(r, ""); err != nil {
			return err
		}
	}
	r.Handle, r.Host, r.Pristine = nil, n.opts.ID, false
	r.Layers = meta.Chain()
	r.Gen++
	r.Disk, r.DiskBase = n.diskPath(r.ID, r.Gen), meta.Disk
	if resume {
		r.ResumeImage = meta.ID
	}
	_, err := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), r.ID, func(cur *store.SandboxRecord) error {
		if cur.Host != from {
			return fmt.Errorf("sandbox %s moved to %s meanwhile: %w", r.ID, cur.Host, errdefs.ErrInvalidState)
		}
		cur.Host, cur.Address, cur.Handle, cur.Pristine = r.Host, r.Address, nil, false
		cur.Kernel, cur.Initrd, cur.KernelArgs = r.Kernel, r.Initrd, r.KernelArgs
		cur.Disk, cur.DiskBase, cur.Layers, cur.ResumeImage, cur.Gen = r.Disk, r.DiskBase, r.Layers, r.ResumeImage, r.Gen
		return nil
	})
	if err != nil {
		n.links.Release(r)
		return err
	}
	n.log.Info("sandbox taken over from another node", logSandbox, r.ID, "from", from, "image", meta.ID)
	return nil
}

// inStore refuses, before anything changes, to start sandbox r (stopped
// on another node) from image id unless the image store holds it whole.
func (n *Node) inStore(ctx context.Context, id string, r *store.SandboxRecord) error {
	if id == "" {
		return fmt.Errorf("sandbox %s has no saved state: %w", r.ID, errdefs.ErrInternal)
	}
	if !n.images.HasRemote() {
		return fmt.Errorf("sandbox %s is on node %s, and host %s has no image store to fetch its image from (ZEISH_IMAGE_STORE): %w",
			r.ID, r.Host, n.opts.ID, errdefs.ErrUnavailable)
	}
	ok, err := n.images.InRemote(ctx, id)
	if err != nil {
		return fmt.Errorf("sandbox %s is on node %s; the image store cannot say whether it holds its image %s: %w", r.ID, r.Host, id, err)
	}
	if !ok {
		return fmt.Errorf("sandbox %s is on node %s and its image %s is not durable in the image store (its upload had not finished): it can start on that node only: %w",
			r.ID, r.Host, id, errdefs.ErrUnavailable)
	}
	return nil
}

// remoteCollectEvery is how often a node that shares an image store
// collects its images: a record deleted through another node frees the
// copies here, and no operation of this node's would collect them.
const remoteCollectEvery = time.Minute

func (n *Node) collectEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.images.Collect(ctx)
		}
	}
}

// ours reports whether sandbox r's VM and files are this node's.
func (n *Node) ours(r *store.SandboxRecord) bool { return r.Host == n.opts.ID }

// CloneImage starts children of sandbox parentID from image, the image a
// fork of it was captured into on another node (whose room the children
// did not fit in): fetched from the image store, waiting for its upload if
// it is still under way.
func (n *Node) CloneImage(ctx context.Context, image, parentID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	if caps := n.opts.Driver.Capabilities(); !caps.LiveFork {
		return nil, fmt.Errorf("this host's VMM (%s) cannot start sandboxes from images: %w", caps.Name, errdefs.ErrInvalidState)
	}
	parent, err := n.opts.Store.GetSandbox(ctx, parentID)
	if err != nil {
		return nil, err
	}
	return n.cloneFromImage(ctx, parent, image, "the fork's image "+image, children)
}
