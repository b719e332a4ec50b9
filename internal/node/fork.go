package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/errdefs"
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
	image *imageMeta
	pause time.Duration
	// unpin lets gc see the image again; call it once a record (children,
	// a snapshot) needs the image, or the operation failed.
	unpin func()
}

// capture freezes sandbox r (running, paused or stopped) into an image and
// puts the sandbox back on top of it. Runs as the sandbox's operation.
func (n *Node) capture(ctx context.Context, id string, op sandbox.Op) (*captured, error) {
	cap, err := n.captureAny(ctx, id, op)
	if err != nil {
		return nil, err
	}
	if cap.unpin == nil {
		cap.unpin = n.pin(cap.image.ID)
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
		if meta, err := n.readImage(filepath.Base(h.Spec.From.Dir)); err == nil && meta.VM != nil && meta.Disk != "" {
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
		spec, err := n.nextVM(ctx, r)
		if err != nil {
			return nil, err
		}
		nh, downtime, err := n.opts.Driver.Promote(ctx, h, spec.Dir)
		if err != nil {
			os.RemoveAll(spec.Dir)
			return nil, fmt.Errorf("promote: %w", err)
		}
		writeHandleFile(spec.Dir, nh)
		if err := n.saveVM(ctx, r, nh); err != nil {
			return nil, err
		}
		n.removeOldVM(h)
		h, pause = nh, downtime
	}
	cap, err := n.captureRunning(ctx, r, h, wasPaused)
	if err != nil {
		return nil, err
	}
	cap.pause += pause
	return cap, nil
}

// captureRunning captures a VM that owns its RAM. The continuation is
// launched before the parent stops, on top of the parent's disk (linked into
// the image now, frozen once the parent is gone) and mapping the parent's
// RAM file, which it does not touch until it loads the image. So the pause
// is only: stop, write device state, quit, load it, go on.
func (n *Node) captureRunning(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, wasPaused bool) (*captured, error) {
	imgID, dir, unpin, err := n.newImageDir()
	if err != nil {
		return nil, err
	}
	defer unpin() // the continuation maps the image from the capture on
	meta := &imageMeta{ID: imgID, SandboxID: r.ID, CreatedAt: time.Now().UTC(),
		Disk: n.layerPath(imgID), Layers: append([]string(nil), r.Layers...)}
	if err := os.Link(r.Disk, meta.Disk); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("link disk into image: %w", err)
	}
	next := *r
	next.Layers = append(append([]string(nil), meta.Layers...), imgID)
	next.Pristine = wasPaused
	spec, err := n.nextVM(ctx, &next)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	spec.BaseDisk, spec.Deferred, spec.Paused = meta.Disk, true, wasPaused
	spec.From = &vmm.Image{Dir: dir, MemFile: h.MemFile, MemoryMiB: h.Spec.MemoryMiB}
	nh, err := n.opts.Driver.Start(ctx, spec)
	if err != nil {
		os.RemoveAll(dir)
		os.RemoveAll(spec.Dir)
		return nil, fmt.Errorf("launch continuation: %w", err)
	}
	img, stoppedAt, err := n.opts.Driver.Capture(ctx, h, dir, false)
	if err != nil {
		n.opts.Driver.Destroy(context.WithoutCancel(ctx), nh)
		os.RemoveAll(dir)
		os.RemoveAll(spec.Dir)
		return nil, err
	}
	// The parent VM is gone: from here the sandbox lives on as the image, so
	// a failure leaves it stopped on that image, never lost.
	meta.VM = img
	os.Remove(r.Disk) // the layer keeps the data under its new name
	os.Chmod(meta.Disk, 0o400)
	n.removeOldVM(h)
	if err := n.writeImage(meta); err != nil {
		n.opts.Driver.Destroy(context.WithoutCancel(ctx), nh)
		return nil, n.lost(ctx, r, err)
	}
	if err := n.opts.Driver.Load(ctx, nh, img, !wasPaused); err != nil {
		n.opts.Driver.Destroy(context.WithoutCancel(ctx), nh)
		os.RemoveAll(spec.Dir)
		return nil, n.stranded(ctx, r, meta, err)
	}
	pause := time.Since(stoppedAt)
	writeHandleFile(spec.Dir, nh)
	next.Disk = nh.Disk
	if err := n.saveVM(ctx, &next, nh); err != nil {
		return nil, err
	}
	*r = next
	n.log.Info("captured", logSandbox, r.ID, "image", imgID, "pause_ms", pause.Milliseconds(), "pid", nh.PID)
	return &captured{image: meta, pause: pause}, nil
}

// stranded handles a continuation that failed to start after the capture:
// the sandbox becomes stopped on the image, which its next start loads.
func (n *Node) stranded(ctx context.Context, r *store.SandboxRecord, meta *imageMeta, cause error) error {
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
	meta, err := n.readImage(r.ResumeImage)
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
	if err := n.freezeDisk(meta, r.Disk, r.Layers); err != nil {
		return nil, err
	}
	if err := n.writeImage(meta); err != nil {
		return nil, err
	}
	r.Layers = append(append([]string(nil), meta.Layers...), meta.ID)
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
	if err := n.startChildren(ctx, parent, cap.image, cap.unpin, children); err != nil {
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
	defer release()
	unpin := n.pin(snap.Image)
	meta, err := n.readMachine(snap.Image)
	if err != nil {
		unpin()
		return nil, fmt.Errorf("snapshot %s has no complete image (%v): %w", snapID, err, errdefs.ErrInternal)
	}
	if err := n.startChildren(ctx, parent, meta, unpin, children); err != nil {
		return nil, err
	}
	return children, nil
}

// admitChildren reserves guest memory for children of parent and checks
// the account's image RAM (names are the control plane's, and the store's
// unique index at the insert); release gives the memory back
// (once the children's records count it).
func (n *Node) admitChildren(ctx context.Context, parent *store.SandboxRecord, children []*store.SandboxRecord) (release func(), err error) {
	release, err = n.reserve(parent, len(children))
	if err != nil {
		return nil, err
	}
	if err := n.checkAccountImageRAM(ctx, parent); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// startChildren records children of parent and boots each from image in
// the background; unpin is called once every child is past its boot (or at
// once on failure, when no record was written).
func (n *Node) startChildren(ctx context.Context, parent *store.SandboxRecord, image *imageMeta, unpin func(), children []*store.SandboxRecord) error {
	now := time.Now().UTC()
	picked := make([]bool, len(children))
	for i, c := range children {
		if c.ID == "" { // a control plane chose it (internal/cluster)
			c.ID = sandbox.NewID(sandbox.PrefixSandbox)
		}
		if picked[i] = c.Name == ""; picked[i] {
			c.Name = n.opts.Names()
		}
		sandbox.Keep(&c.Sandbox, parent.Sandbox)
		c.SecretEnv, c.MAC = parent.SecretEnv, sandbox.NewMAC()
		if err := n.childNetwork(parent, c); err != nil {
			n.releaseNetworks(children)
			unpin()
			n.gc(ctx)
			return err
		}
		c.Kernel, c.Initrd, c.KernelArgs = parent.Kernel, parent.Initrd, parent.KernelArgs
		c.Layers = append(append([]string(nil), image.Layers...), image.ID)
		c.State, c.CreatedAt, c.UpdatedAt = sandbox.StateStarting, now, now
		if c.Metadata == nil {
			c.Metadata = map[string]string{}
		}
	}
	// All children or none: a name the caller gave that was taken since the control plane
	// checked refuses the clone (the parent was captured, and carries on unharmed).
	if err := n.createRecords(ctx, picked, children...); err != nil {
		n.releaseNetworks(children)
		unpin()
		n.gc(ctx)
		return err
	}
	remaining := len(children)
	for _, c := range children {
		sw, switched := sandbox.ForkSwitch(parent.Sandbox, c.Sandbox)
		n.run(c.ID, func(ctx context.Context) {
			var ready func(context.Context) error
			if switched {
				ready = func(ctx context.Context) error { return n.gitSwitch(ctx, c, sw) }
			}
			n.bootFromImage(ctx, c, image, ready)
			n.mu.Lock()
			remaining--
			last := remaining == 0
			n.mu.Unlock()
			if last {
				unpin()
			}
		})
	}
	return nil
}

// bootFromImage starts a fork child from the image its parent was captured
// into; ready (nil: none) is its git checkout.
func (n *Node) bootFromImage(ctx context.Context, r *store.SandboxRecord, meta *imageMeta, ready func(context.Context) error) {
	n.bootNew(ctx, r, "fork", ready, func(_ context.Context, spec *vmm.Spec) error {
		spec.BaseDisk, spec.From = meta.Disk, meta.VM
		return nil
	})
}
