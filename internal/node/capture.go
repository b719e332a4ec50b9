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
	// Complete: to the image store, after the pause (remote.go).
	n.images.Publish(cap.image)
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
	n.agents.Drop(id)
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
	c := &continuation{meta: &images.Meta{}, next: *r, wasPaused: wasPaused}
	defer func() { c.lease.Release() }() // the continuation maps the image from the capture on
	if err := n.captureParent(ctx, r, h, c); err != nil {
		return nil, err
	}
	// The parent VM is gone: from here the sandbox lives on as the image, so
	// a failure leaves it stopped on that image, never lost.
	os.Remove(r.Disk) // the layer keeps the data under its new name
	images.ReadOnly(c.meta.Disk)
	n.removeOldVM(h)
	pause, err := n.resumeContinuation(ctx, c)
	var lost *captureLost
	var stranded *captureStranded
	switch {
	case errors.As(err, &lost):
		return nil, n.lost(ctx, r, lost.err)
	case errors.As(err, &stranded):
		return nil, n.stranded(ctx, r, c.meta, stranded.err)
	case err != nil:
		return nil, err
	}
	*r = c.next
	n.log.Info("captured", logSandbox, r.ID, "image", c.meta.ID, "pause_ms", pause.Milliseconds(), "pid", c.nh.PID)
	return &captured{image: c.meta, pause: pause}, nil
}

// newImage is the step that makes a new image's folder, leased (the
// caller releases *lease), and removes it if a later step fails.
func (n *Node) newImage(id, dir *string, lease **images.Lease) rollback.Step {
	return rollback.Step{Name: "image", Do: func(_ context.Context, undo *rollback.Stack) (err error) {
		if *id, *dir, *lease, err = n.images.Create(); err != nil {
			return err
		}
		undo.Add(removeDir(*dir))
		return nil
	}}
}

// continuation is what captureRunning's two step lists share.
type continuation struct {
	meta      *images.Meta
	dir       string // the image's folder
	lease     *images.Lease
	next      store.SandboxRecord // the sandbox as the continuation runs it
	wasPaused bool
	spec      vmm.Spec
	nh        *vmm.Handle
	stoppedAt time.Time
}

// captureParent launches the continuation and captures the parent VM h of
// r into a new image; a failure undoes it all and leaves h running.
func (n *Node) captureParent(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, c *continuation) error {
	return rollback.Run(ctx,
		n.newImage(&c.meta.ID, &c.dir, &c.lease),
		rollback.Step{Name: "link disk into image", Do: func(context.Context, *rollback.Stack) error {
			c.meta.SandboxID, c.meta.Template, c.meta.CreatedAt = r.ID, r.Template, time.Now().UTC()
			c.meta.Disk, c.meta.Layers = n.images.LayerPath(c.meta.ID), append([]string(nil), r.Layers...)
			return os.Link(r.Disk, c.meta.Disk)
		}},
		rollback.Step{Name: "continuation folder", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			c.next.Layers, c.next.Pristine = c.meta.Chain(), c.wasPaused
			c.spec, err = n.nextVM(ctx, &c.next)
			undo.Add(removeDir(c.spec.Dir))
			return err
		}},
		rollback.Step{Name: "launch continuation", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			c.spec.BaseDisk, c.spec.Deferred, c.spec.Paused = c.meta.Disk, true, c.wasPaused
			c.spec.From = &vmm.Image{Dir: c.dir, MemFile: h.MemFile, MemoryMiB: h.Spec.MemoryMiB}
			if c.nh, err = n.opts.Driver.Start(ctx, c.spec); err != nil {
				return err
			}
			undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, c.nh) })
			return nil
		}},
		rollback.Step{Name: "capture", Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
			c.meta.VM, c.stoppedAt, err = n.opts.Driver.Capture(ctx, h, c.dir, false)
			return err
		}},
	)
}

// resumeContinuation completes the image and has the continuation load it
// and run the sandbox; pause is how long the guest did not run. A failure
// undoes the continuation and says what is left (captureLost,
// captureStranded).
func (n *Node) resumeContinuation(ctx context.Context, c *continuation) (pause time.Duration, err error) {
	err = rollback.Run(ctx,
		rollback.Step{Name: "record", Do: func(ctx context.Context, undo *rollback.Stack) error {
			undo.Add(removeDir(c.spec.Dir))
			undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, c.nh) })
			if err := n.images.Write(c.meta); err != nil {
				return &captureLost{err}
			}
			return nil
		}},
		rollback.Step{Name: "load", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if err := n.opts.Driver.Load(ctx, c.nh, c.meta.VM, !c.wasPaused); err != nil {
				return &captureStranded{err}
			}
			pause = time.Since(c.stoppedAt)
			return nil
		}},
		rollback.Step{Name: "save", Do: func(ctx context.Context, undo *rollback.Stack) error {
			undo.Release() // the continuation runs the sandbox now
			writeHandleFile(c.spec.Dir, c.nh)
			c.next.Disk = c.nh.Disk
			return n.saveVM(ctx, &c.next, c.nh)
		}},
	)
	return pause, err
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
