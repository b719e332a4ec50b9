package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Fork and snapshot share one move, capture: the sandbox's VM is captured
// into an image (memory, device state, and its disk frozen as a read-only
// layer), and the sandbox carries on as a VM started from that image on a
// fresh overlay. Forks start from the same image; a snapshot keeps it.
//
// A running sandbox that owns its RAM (booted, or started from a full image)
// is paused only while its device state is written and its continuation
// loads it: its RAM file becomes the image as it is, so the pause does not
// grow with memory. A sandbox whose RAM is an image's (a fork child, a parent
// after a fork, a restored sandbox) is captured live (capturelive.go): its
// RAM is copied while it runs, it pauses only to switch over, and it runs on
// in the same VM. A stopped sandbox already is an image (its suspend state):
// only its disk is frozen.

// captured is what capture produced.
type captured struct {
	image *images.Meta
	pause time.Duration
	// lease keeps the image from gc; release it once a record (children,
	// a snapshot) needs the image, or the operation failed.
	lease *images.Lease
}

// capture freezes sandbox r (running, paused or stopped) into an image and
// puts the sandbox back on top of it. Runs as the sandbox's operation.
func (n *Node) capture(ctx context.Context, id string, op sandbox.Op) (*captured, error) {
	cap, err := n.captureAny(ctx, id, op)
	if err != nil {
		return nil, err
	}
	if cap.lease == nil {
		cap.lease = n.images.Lease(cap.image.ID)
	}
	// One line per capture with the whole pause (promotion included): the
	// bench reads snapshot pauses from it.
	n.log.Info("capture done", logSandbox, id, "image", cap.image.ID, "pause_ms", cap.pause.Milliseconds())
	return cap, nil
}

func (n *Node) captureAny(ctx context.Context, id string, op sandbox.Op) (*captured, error) {
	r, h, err := n.load(ctx, id, op)
	if err != nil {
		return nil, err
	}
	if r.State == sandbox.StateStopped {
		return n.captureStopped(ctx, r)
	}
	wasPaused := r.State == sandbox.StatePaused
	if wasPaused && r.Pristine && h.Spec.From != nil && h.Spec.From.MemFile != "" {
		// Paused since it was loaded from its image: it still is that image.
		if meta, err := n.images.Read(filepath.Base(h.Spec.From.Dir)); err == nil && meta.VM != nil && meta.Disk != "" {
			n.log.Info("captured (pristine)", logSandbox, id, "image", meta.ID)
			return &captured{image: meta}, nil
		}
	}
	// The driver knows whose RAM a VM maps, and so how it is captured.
	plan := n.opts.Driver.PlanCapture(h, !wasPaused, n.opts.StoppedPromotion)
	if plan == vmm.CaptureLive && !n.opts.Driver.Capabilities().LiveCapture {
		plan = vmm.CapturePromote
	}
	if plan == vmm.CaptureLive {
		return n.captureLive(ctx, r, h, wasPaused)
	}
	var pause time.Duration
	n.dropAgent(id)
	if plan == vmm.CapturePromote {
		if h, pause, err = n.promote(ctx, r, h); err != nil {
			return nil, err
		}
	}
	cap, err := n.captureRunning(ctx, r, h, wasPaused)
	if err != nil {
		return nil, err
	}
	cap.pause += pause
	return cap, nil
}

// promote moves sandbox r's VM h, whose RAM is an image's, into a VM that
// owns its RAM (the guest stopped for the copy), so that it can be
// captured as one that does.
func (n *Node) promote(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle) (nh *vmm.Handle, downtime time.Duration, err error) {
	var spec vmm.Spec
	err = rollback.Run(ctx,
		rollback.Step{Name: "folder", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			spec, err = n.nextVM(ctx, r)
			undo.Add(removeDir(spec.Dir))
			return err
		}},
		rollback.Step{Name: "promote", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			if nh, downtime, err = n.opts.Driver.Promote(ctx, h, spec.Dir); err != nil {
				return err
			}
			undo.Release() // the old VM is gone: the new one in spec.Dir is the sandbox's
			return nil
		}},
		rollback.Step{Name: "record", Do: func(ctx context.Context, _ *rollback.Stack) error {
			writeHandleFile(spec.Dir, nh)
			return n.saveVM(ctx, r, nh)
		}},
	)
	if err != nil {
		return nil, 0, err
	}
	n.removeOldVM(h)
	return nh, downtime, nil
}

// captureRunning captures a VM that owns its RAM. The continuation is
// launched before the parent stops, on top of the parent's disk (linked into
// the image now, frozen once the parent is gone) and mapping the parent's
// RAM file, which it does not touch until it loads the image. So the pause
// is only: stop, write device state, quit, load it, go on.
//
// Two step lists: the capture (undone whole if it fails: the parent VM
// runs on), and the continuation's resume, after which the parent VM is
// gone and the sandbox lives on as the image: a failure there undoes only
// the continuation and leaves the sandbox lost (no complete image) or
// stopped on the image (the continuation did not load it).
func (n *Node) captureRunning(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, wasPaused bool) (*captured, error) {
	var (
		meta      *images.Meta
		dir       string
		lease     *images.Lease
		next      = *r
		spec      vmm.Spec
		nh        *vmm.Handle
		stoppedAt time.Time
		pause     time.Duration
	)
	defer func() { lease.Release() }() // the continuation maps the image from the capture on
	err := rollback.Run(ctx,
		rollback.Step{Name: "image", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			var id string
			if id, dir, lease, err = n.images.Create(); err != nil {
				return err
			}
			undo.Add(removeDir(dir))
			meta = &images.Meta{ID: id, SandboxID: r.ID, CreatedAt: time.Now().UTC(),
				Disk: n.images.LayerPath(id), Layers: append([]string(nil), r.Layers...)}
			return nil
		}},
		rollback.Step{Name: "link disk into image", Do: func(context.Context, *rollback.Stack) error {
			return os.Link(r.Disk, meta.Disk)
		}},
		rollback.Step{Name: "continuation folder", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			next.Layers, next.Pristine = meta.Chain(), wasPaused
			spec, err = n.nextVM(ctx, &next)
			undo.Add(removeDir(spec.Dir))
			return err
		}},
		rollback.Step{Name: "launch continuation", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			spec.BaseDisk, spec.Deferred, spec.Paused = meta.Disk, true, wasPaused
			spec.From = &vmm.Image{Dir: dir, MemFile: h.MemFile, MemoryMiB: h.Spec.MemoryMiB}
			if nh, err = n.opts.Driver.Start(ctx, spec); err != nil {
				return err
			}
			undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, nh) })
			return nil
		}},
		rollback.Step{Name: "capture", Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
			meta.VM, stoppedAt, err = n.opts.Driver.Capture(ctx, h, dir, false)
			return err
		}},
	)
	if err != nil {
		return nil, err
	}
	// The parent VM is gone: from here the sandbox lives on as the image, so
	// a failure leaves it stopped on that image, never lost.
	os.Remove(r.Disk) // the layer keeps the data under its new name
	images.ReadOnly(meta.Disk)
	n.removeOldVM(h)
	err = rollback.Run(ctx,
		rollback.Step{Name: "record", Do: func(ctx context.Context, undo *rollback.Stack) error {
			undo.Add(removeDir(spec.Dir))
			undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, nh) })
			if err := n.images.Write(meta); err != nil {
				return &captureLost{err}
			}
			return nil
		}},
		rollback.Step{Name: "load", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if err := n.opts.Driver.Load(ctx, nh, meta.VM, !wasPaused); err != nil {
				return &captureStranded{err}
			}
			pause = time.Since(stoppedAt)
			return nil
		}},
		rollback.Step{Name: "save", Do: func(ctx context.Context, undo *rollback.Stack) error {
			undo.Release() // the continuation runs the sandbox now
			writeHandleFile(spec.Dir, nh)
			next.Disk = nh.Disk
			return n.saveVM(ctx, &next, nh)
		}},
	)
	var lost *captureLost
	var stranded *captureStranded
	switch {
	case errors.As(err, &lost):
		return nil, n.lost(ctx, r, lost.err)
	case errors.As(err, &stranded):
		return nil, n.stranded(ctx, r, meta, stranded.err)
	case err != nil:
		return nil, err
	}
	*r = next
	n.log.Info("captured", logSandbox, r.ID, "image", meta.ID, "pause_ms", pause.Milliseconds(), "pid", nh.PID)
	return &captured{image: meta, pause: pause}, nil
}

// captureLost and captureStranded are how a capture's resume failed: the
// image could not be completed (nothing is left to run the sandbox from),
// or the continuation did not load it (the sandbox can start from it).
type (
	captureLost     struct{ err error }
	captureStranded struct{ err error }
)

func (e *captureLost) Error() string     { return e.err.Error() }
func (e *captureStranded) Error() string { return e.err.Error() }

// stranded handles a continuation that failed to start after the capture:
// the sandbox becomes stopped on the image, which its next start loads.
func (n *Node) stranded(ctx context.Context, r *store.SandboxRecord, meta *images.Meta, cause error) error {
	r.Disk = n.diskPath(r.ID, r.Gen+1)
	r.DiskBase, r.ResumeImage = meta.Disk, meta.ID
	n.saveVM(ctx, r, nil)
	n.transition(ctx, r.ID, sandbox.OpStranded, "could not resume after capture: "+cause.Error(), nil)
	return fmt.Errorf("resume after capture: %w", cause)
}

// lost marks a sandbox whose VM was captured but whose image could not be
// completed: nothing is left to run it from.
func (n *Node) lost(ctx context.Context, r *store.SandboxRecord, cause error) error {
	n.saveVM(ctx, r, nil)
	n.fail(ctx, r.ID, sandbox.OpCaptureLost, sandbox.ErrCaptureFailed, "capture failed: "+cause.Error(), "capture failed: "+cause.Error(), nil)
	return cause
}

// captureStopped freezes a stopped sandbox's disk into its resume image,
// which then holds memory, device state and disk: a complete image. The
// sandbox gets a fresh overlay on it at its next start.
func (n *Node) captureStopped(ctx context.Context, r *store.SandboxRecord) (*captured, error) {
	meta, err := n.images.Read(r.ResumeImage)
	if err != nil {
		return nil, err
	}
	if meta.Disk != "" {
		return &captured{image: meta}, nil // captured before and not started since
	}
	if r.DiskBase != "" {
		// The sandbox's disk was never made (restored while stopped): its
		// content is that layer's.
		return nil, fmt.Errorf("sandbox %s: capture of an unstarted restore: %w", r.ID, errdefs.ErrInvalidState)
	}
	if err := n.images.FreezeDisk(meta, r.Disk, r.Layers); err != nil {
		return nil, err
	}
	if err := n.images.Write(meta); err != nil {
		return nil, err
	}
	r.Layers = meta.Chain()
	r.Gen++
	r.Disk = n.diskPath(r.ID, r.Gen)
	r.DiskBase = meta.Disk
	if err := n.saveVM(ctx, r, nil); err != nil {
		return nil, err
	}
	return &captured{image: meta}, nil
}

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
	if err := n.startChildren(ctx, parent, cap.image, cap.lease, children); err != nil {
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
	release, err := n.admitChildren(ctx, parent, children)
	if err != nil {
		return nil, err
	}
	defer release() // the children's records count from here on
	var (
		lease *images.Lease
		meta  *images.Meta
	)
	err = rollback.Run(ctx,
		rollback.Step{Name: "image", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) (err error) {
			lease = n.images.Lease(snap.Image)
			undo.Add(func(context.Context) error { lease.Release(); return nil })
			if meta, err = n.images.ReadMachine(snap.Image); err != nil {
				return fmt.Errorf("snapshot %s has no complete image (%v): %w", snapID, err, errdefs.ErrInternal)
			}
			return nil
		}},
		rollback.Step{Name: "children", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			return n.startChildren(ctx, parent, meta, lease, children)
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

// startChildren records children of parent and boots each from image in
// the background; lease is released once every child is past its boot (or at
// once on failure, when no record was written).
func (n *Node) startChildren(ctx context.Context, parent *store.SandboxRecord, image *images.Meta, lease *images.Lease, children []*store.SandboxRecord) error {
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
				c.ID = sandbox.NewID(sandbox.PrefixSandbox)
				if picked[i] = c.Name == ""; picked[i] {
					c.Name = n.opts.Names()
				}
				sandbox.Keep(&c.Sandbox, parent.Sandbox)
				c.SecretEnv, c.MAC = parent.SecretEnv, sandbox.NewMAC()
				if err := n.links.Child(parent, c); err != nil {
					return err
				}
				c.Kernel, c.Initrd, c.KernelArgs = parent.Kernel, parent.Initrd, parent.KernelArgs
				c.Layers = image.Chain()
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
			n.bootFromImage(ctx, c, image, checkout)
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
// into; checkout (nil: none) is its git checkout.
func (n *Node) bootFromImage(ctx context.Context, r *store.SandboxRecord, meta *images.Meta, checkout func(context.Context) error) {
	n.bootNew(ctx, r, "fork", checkout, func(_ context.Context, spec *vmm.Spec) error {
		spec.BaseDisk, spec.From = meta.Disk, meta.VM
		return nil
	})
}
