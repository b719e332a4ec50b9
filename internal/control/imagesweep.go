package control

import (
	"context"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// ImageSweeper deletes from the image store the images nothing refers to,
// then the chunks no image lists (*imagestore.Store).
type ImageSweeper interface {
	Sweep(ctx context.Context, referenced imagestore.Referenced) (imagestore.SweepStats, error)
	GC(ctx context.Context) (imagestore.GCStats, error)
}

// ImageSweepLease is the store lease under which one replica at a time
// sweeps the image store (the sweep is safe twice at once; this saves the
// work).
const ImageSweepLease = "image-sweep"

// SweepImages sweeps the image store every interval until ctx ends, on the
// replica holding ImageSweepLease; nothing without an ImageSweeper. The
// records say which images are needed (ImageRoots); the nodes' claims and
// the store's grace cover the rest (docs/images.md, "Garbage collection").
func (c *Control) SweepImages(ctx context.Context, every time.Duration) {
	if c.sweeper == nil {
		return
	}
	ttl := max(3*every, 3*time.Minute) // longer than one sweep and gc
	held := false
	defer func() {
		if held {
			c.store.ReleaseLease(context.WithoutCancel(ctx), ImageSweepLease, c.replica)
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := c.store.TryLease(ctx, ImageSweepLease, c.replica, time.Now(), ttl)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("image sweep: lease", "err", err)
			}
			continue
		}
		if held = ok; ok {
			c.SweepImagesOnce(ctx)
		}
	}
}

// SweepImagesOnce deletes the images nothing refers to, then collects
// their chunks.
func (c *Control) SweepImagesOnce(ctx context.Context) (imagestore.SweepStats, imagestore.GCStats, error) {
	st, err := c.sweeper.Sweep(ctx, c.ImageRoots)
	if err != nil {
		c.log.Warn("image sweep", "err", err)
		return st, imagestore.GCStats{}, err
	}
	gst, err := c.sweeper.GC(ctx)
	if err != nil {
		c.log.Warn("image store gc after the sweep", "err", err)
	}
	return st, gst, err
}

// ImageRoots are the images the records of the database name, read in
// fields the control plane writes: every snapshot's image, every sandbox's
// saved state while it is not deleted, every template's files and warm
// machine while it is not deleted or a sandbox still stands on it. The
// disk chains below them are the store's to follow (their manifests); the
// images a node holds without a record yet (a capture in progress, a
// running VM's layers) are the node's claim.
func (c *Control) ImageRoots(ctx context.Context) (map[string]bool, error) {
	roots := map[string]bool{}
	snaps, err := c.store.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, s := range snaps {
		if s.Image != "" {
			roots[s.Image] = true
		}
	}
	rows, err := c.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	inUse := map[string]bool{} // template keys
	for _, r := range rows {
		if r.State.Deleted() {
			continue
		}
		if r.ResumeImage != "" {
			roots[r.ResumeImage] = true
		}
		inUse[r.Template] = true
	}
	tpls, err := c.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tpls {
		if t.State == sandbox.TemplateDeleted && !inUse[t.Key()] {
			continue
		}
		roots[imagestore.TemplateImage(t.ID)] = true
		if t.Warm != nil && t.Warm.Image != "" {
			roots[t.Warm.Image] = true
		}
	}
	return roots, nil
}
