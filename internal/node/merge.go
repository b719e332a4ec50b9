package node

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/zeish/zeish/sandbox"
)

// The node's side of bounded disk chains (internal/node/merge): which
// sandboxes stand on which layers, and moving a VM onto a merge.

// mergeSandboxes is the node as the merger sees it (merge.Sandboxes).
type mergeSandboxes struct{ n *Node }

// Layers is the chain sandbox id's VM stands on, if it runs here.
func (s mergeSandboxes) Layers(ctx context.Context, id string) []string {
	r, err := s.n.opts.Store.GetSandbox(ctx, id)
	if err != nil || r.Host != s.n.opts.ID {
		return nil
	}
	if h, _ := r.VMHandle(); h == nil {
		return nil
	}
	return r.Layers
}

// Rebase runs rebase as the sandbox's operation.
func (s mergeSandboxes) Rebase(ctx context.Context, id, top, merged string) error {
	return s.n.do(ctx, id, func(ctx context.Context) error { return s.n.rebase(ctx, id, top, merged) })
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
