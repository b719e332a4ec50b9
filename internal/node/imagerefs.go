package node

import (
	"context"
	"path/filepath"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// imageRefs tells the image store what the node's records need of its
// images (images.Referrers): the store holds no references itself.
type imageRefs struct{ n *Node }

// Roots are the images the records of sandboxes, snapshots and templates
// need.
func (r imageRefs) Roots(ctx context.Context) (images.Roots, error) {
	n, roots := r.n, images.NewRoots()
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return roots, err
	}
	for _, r := range rows {
		for _, l := range r.Layers {
			roots.Layers[l] = true
		}
		if r.ResumeImage != "" {
			roots.Whole[r.ResumeImage] = true
		}
		if h, _ := r.VMHandle(); h != nil && h.Spec.From != nil && h.Spec.From.MemFile != "" {
			roots.Whole[filepath.Base(h.Spec.From.Dir)] = true
		}
	}
	snaps, err := n.opts.Store.ListSnapshots(ctx, "")
	if err != nil {
		return roots, err
	}
	for _, s := range snaps {
		roots.Whole[s.Image] = true
		if m, err := n.images.Read(s.Image); err == nil {
			for _, l := range m.Layers {
				roots.Layers[l] = true
			}
		}
	}
	// A warm template's machine (and its card-less twin) lives as long as
	// the template; once it is deleted, as long as a sandbox started from it
	// needs it.
	tpls, err := n.opts.Store.ListTemplates(ctx)
	if err != nil {
		return roots, err
	}
	for _, t := range tpls {
		if t.Warm != nil && t.State != sandbox.TemplateDeleted {
			roots.Whole[t.Warm.Image] = true
			if id := n.images.Twin(t.Warm.Image); id != "" { // made beside it (cardless.go)
				roots.Whole[id] = true
			}
		}
	}
	return roots, nil
}

// Mapped are the images a VM of a record maps (or will, once it loads).
func (r imageRefs) Mapped(ctx context.Context) (map[string]bool, error) {
	rows, err := r.n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	mapped := map[string]bool{}
	for _, r := range rows {
		if h, _ := r.VMHandle(); h != nil && h.Spec.From != nil {
			mapped[filepath.Base(h.Spec.From.Dir)] = true
		}
	}
	return mapped, nil
}
