package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Clone forks sandbox parentID into the given children (validated records,
// fields kept or overridden by the caller). The parent is captured before
// Clone returns (the pause it reports); the children boot from the image in
// the background, each on the parent's host.
func (n *Node) Clone(ctx context.Context, parentID string, children []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	if caps := n.opts.Driver.Capabilities(); !caps.LiveFork {
		return 0, nil, fmt.Errorf("this host's VMM (%s) cannot fork sandboxes: %w", caps.Name, errdefs.ErrInvalidState)
	}
	parent, err := n.opts.Store.GetSandbox(ctx, parentID)
	if err != nil {
		return 0, nil, err
	}
	// Refuse a full host before the parent is paused (names: the control plane).
	release, err := n.admitChildren(ctx, parent, children)
	if err != nil {
		return 0, nil, err
	}
	defer release() // the children's records count from here on
	var cap *captured
	err = n.do(ctx, parentID, func(ctx context.Context) error {
		var err error
		cap, err = n.capture(ctx, parentID, sandbox.OpClone)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	parent, _ = n.opts.Store.GetSandbox(ctx, parentID)
	here := func(context.Context) (*images.Meta, error) { return cap.image, nil }
	if err := n.startChildren(ctx, parent, cap.image.Chain(), here, cap.lease, children); err != nil {
		return cap.pause, nil, err
	}
	return cap.pause, children, nil
}

// CloneSnapshot starts children from a snapshot of a sandbox: each is a
// fork child of the sandbox as it was when the snapshot was taken (memory,
// processes, disk), with the sandbox's fields of now. The sandbox itself is
// not touched, whatever its state.
func (n *Node) CloneSnapshot(ctx context.Context, snapID string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	if caps := n.opts.Driver.Capabilities(); !caps.LiveFork {
		return nil, fmt.Errorf("this host's VMM (%s) cannot start sandboxes from images: %w", caps.Name, errdefs.ErrInvalidState)
	}
	snap, err := n.opts.Store.GetSnapshot(ctx, snapID)
	if err != nil {
		return nil, err
	}
	parent, err := n.opts.Store.GetSandbox(ctx, snap.SandboxID)
	if err != nil {
		return nil, err
	}
	return n.cloneFromImage(ctx, parent, snap.Image, "snapshot "+snapID, children)
}

// cloneFromImage starts children of parent from image (what names it in
// errors), fetched from the image store when this node lacks it: the
// children are recorded first (once the store says what the image stands
// on), and each shows the one fetch's progress while it starts.
func (n *Node) cloneFromImage(ctx context.Context, parent *store.SandboxRecord, image, what string, children []*store.SandboxRecord) ([]*store.SandboxRecord, error) {
	release, err := n.admitChildren(ctx, parent, children)
	if err != nil {
		return nil, err
	}
	defer release() // the children's records count from here on
	var (
		lease *images.Lease
		chain []string
	)
	err = rollback.Run(ctx,
		rollback.Step{Name: "image", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) (err error) {
			lease = n.images.Lease(image)
			undo.Add(func(context.Context) error { lease.Release(); return nil })
			if chain, err = n.images.Chain(ctx, image); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if !n.ours(parent) {
				// The children get the parent's kernel: this node's copy.
				p := *parent
				if err := n.localKernel(ctx, &p, ""); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				parent = &p
			}
			return nil
		}},
		rollback.Step{Name: "children", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			// One fetch for all children, under the node's lifetime: a
			// child deleted meanwhile does not cut it short for the others.
			load := sync.OnceValues(func() (*images.Meta, error) {
				ids := make([]string, len(children))
				for i, c := range children {
					ids[i] = c.ID
				}
				m, err := n.image(n.life, image, ids...)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", what, err)
				}
				return m, nil
			})
			return n.startChildren(ctx, parent, chain, func(context.Context) (*images.Meta, error) { return load() }, lease, children)
		}},
	)
	if err != nil {
		return nil, err
	}
	return children, nil
}

// admitChildren reserves guest memory for children of parent and checks
// the account's image RAM (names are the control plane's, and the store's
// unique index at the insert); release gives the memory back
// (once the children's records count it).
func (n *Node) admitChildren(ctx context.Context, parent *store.SandboxRecord, children []*store.SandboxRecord) (release func(), err error) {
	err = rollback.Run(ctx,
		rollback.Step{Name: "memory", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) (err error) {
			if release, err = n.budget.Reserve(parent.MemoryMiB, len(children)); err != nil {
				return err
			}
			undo.Add(func(context.Context) error { release(); return nil })
			return nil
		}},
		rollback.Step{Name: "image RAM", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			return n.checkAccountImageRAM(ctx, parent)
		}},
	)
	if err != nil {
		return nil, err
	}
	return release, nil
}

// startChildren records children of parent, standing on an image of disk
// chain chain, and boots each in the background from the image load
// brings; lease is released once every child is past its boot (or at
// once on failure, when no record was written).
func (n *Node) startChildren(ctx context.Context, parent *store.SandboxRecord, chain []string, load func(context.Context) (*images.Meta, error),
	lease *images.Lease, children []*store.SandboxRecord) error {
	picked := make([]bool, len(children))
	// Its refusals are the client's (a child's network, a name): as they are.
	err := rollback.Run(ctx,
		rollback.Step{Name: "image", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) error {
			// Without the children's records the image may be nobody's: gc
			// takes it.
			undo.Add(func(ctx context.Context) error { lease.Release(); n.images.Collect(ctx); return nil })
			return nil
		}},
		rollback.Step{Name: "identities", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) error {
			undo.Add(func(context.Context) error { n.links.ReleaseAll(children); return nil })
			now := time.Now().UTC()
			for i, c := range children {
				if c.ID == "" { // a control plane chose it (internal/cluster)
					c.ID = sandbox.NewID(sandbox.PrefixSandbox)
				}
				if picked[i] = c.Name == ""; picked[i] {
					c.Name = n.opts.Names()
				}
				sandbox.Keep(&c.Sandbox, parent.Sandbox)
				c.SecretEnv, c.MAC = parent.SecretEnv, sandbox.NewMAC()
				if err := n.links.Child(parent, c); err != nil {
					return err
				}
				c.Kernel, c.Initrd, c.KernelArgs = parent.Kernel, parent.Initrd, parent.KernelArgs
				c.Host = n.opts.ID // the parent's, or this one when it is another's (CloneImage)
				c.Layers = append([]string(nil), chain...)
				c.State, c.CreatedAt, c.UpdatedAt = sandbox.StateStarting, now, now
				if c.Metadata == nil {
					c.Metadata = map[string]string{}
				}
			}
			return nil
		}},
		// All children or none: a name the caller gave that was taken since
		// the control plane checked refuses the clone (the parent was
		// captured, and carries on unharmed).
		rollback.Step{Name: "records", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			return n.createRecords(ctx, picked, children...)
		}},
	)
	if err != nil {
		return err
	}
	remaining := len(children)
	for _, c := range children {
		sw, switched := sandbox.ForkSwitch(parent.Sandbox, c.Sandbox)
		n.run(c.ID, func(ctx context.Context) {
			var checkout func(context.Context) error
			if switched {
				checkout = func(ctx context.Context) error { return n.gitSwitch(ctx, c, sw) }
			}
			n.bootFromImage(ctx, c, load, checkout)
			n.mu.Lock()
			remaining--
			last := remaining == 0
			n.mu.Unlock()
			if last {
				lease.Release()
			}
		})
	}
	return nil
}

// bootFromImage starts a fork child from the image its parent was captured
// into, which load brings; checkout (nil: none) is its git checkout.
func (n *Node) bootFromImage(ctx context.Context, r *store.SandboxRecord, load func(context.Context) (*images.Meta, error), checkout func(context.Context) error) {
	n.bootNew(ctx, r, "fork", checkout, func(ctx context.Context, spec *vmm.Spec) error {
		meta, err := load(ctx)
		if err != nil {
			return err
		}
		spec.BaseDisk, spec.From = meta.Disk, meta.VM
		return nil
	})
}
