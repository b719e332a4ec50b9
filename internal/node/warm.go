package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/node/ready"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// A warm template is a template booted once, its start command started and
// its ready command passed, and captured into an image like a fork's
// parent. Creating a sandbox from it is then a fork child's start: the
// image's RAM mapped copy-on-write and its device state loaded, the guest
// re-identified (hostname, address, clock, entropy, env) before it reports
// running, with the start command's processes already running.
//
// The image only fits a machine like the one it was taken from: the same
// vCPUs, memory and disk size, and a network card. The build takes it at
// the size the template asks for (vcpus, memory_mib; default the default
// size), so each template is warm at one size; a create that asks for
// anything else boots cold, as a template without a warm image does.

// DefaultReadyTimeout bounds the wait for a warm template's ready command
// unless the template sets its own.
const DefaultReadyTimeout = 10 * time.Minute

// warmPoll is how often the ready command is run until it succeeds.
const warmPoll = 250 * time.Millisecond

// WarmSize is the machine a warm image is taken on: the template's vCPUs
// and memory (the default size's where it sets none), with a disk no
// smaller than the template's file system.
func WarmSize(tpl sandbox.Template) sandbox.Size {
	size, err := sandbox.ResolveSize("", tpl.VCPUs, tpl.MemoryMiB, 0)
	if err != nil { // checked at the build request; a bad row gets the default
		size, _ = sandbox.ResolveSize("", 0, 0, 0)
	}
	size.DiskMiB = max(size.DiskMiB, tpl.DiskMiB)
	return size
}

// Warm boots tpl on a machine of WarmSize, runs its start command, waits
// until its ready command exits 0, and captures the machine into an image.
// The image is leased until the caller's unpin, which it calls once the
// template's record names the image (or the build failed). progress gets
// one line per step. Nothing is left behind on failure.
func (n *Node) Warm(ctx context.Context, tpl sandbox.Template, progress func(string)) (*sandbox.TemplateWarm, func(), error) {
	w, err := n.warmBuild(ctx, tpl, false, progress)
	if err != nil {
		return nil, nil, err
	}
	out := &sandbox.TemplateWarm{Image: w.meta.ID, VCPUs: w.size.VCPUs, MemoryMiB: w.size.MemoryMiB, DiskMiB: w.size.DiskMiB,
		BuildMS: time.Since(w.started).Milliseconds()}
	n.log.Info("template warmed", "template", tpl.ID, "image", w.meta.ID, "ms", out.BuildMS)
	n.ready.Note(ready.Kind{Template: tpl.Key()}) // its first creates find a VM ready once the record names the image
	// Once the record names the image, the ready pool can use it.
	return out, func() { w.lease.Release(); n.ready.Wake() }, nil
}

// warmBuild runs the steps of a warm build of tpl, on a machine with no
// network card when cardless (cardless.go). On success the image is
// recorded and leased (w.lease).
func (n *Node) warmBuild(ctx context.Context, tpl sandbox.Template, cardless bool, progress func(string)) (*warmRun, error) {
	dir := filepath.Join(n.opts.DataDir, "warm", tpl.ID)
	if cardless {
		dir += cardlessSuffix
	}
	w := &warmRun{n: n, tpl: tpl, size: WarmSize(tpl), progress: progress, started: time.Now(), dir: dir, cardless: cardless}
	defer w.cleanup()
	err := rollback.Run(ctx,
		rollback.Step{Name: "reserve", Do: w.reserve},
		rollback.Step{Name: "prepare", Do: w.prepare},
		rollback.Step{Name: "boot", Do: w.boot},
		rollback.Step{Name: "configure", Do: w.configure},
		rollback.Step{Name: "ready", Do: w.ready},
		rollback.Step{Name: "capture", Do: w.capture},
		rollback.Step{Name: "record", Do: w.record},
	)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// warmRun is one warm build: what its steps share.
type warmRun struct {
	n        *Node
	tpl      sandbox.Template
	size     sandbox.Size
	progress func(string)
	started  time.Time
	dir      string // the build's folder, removed at the end whatever happened
	release  func() // the memory reservation, given back at the end
	spec     vmm.Spec
	h        *vmm.Handle
	c        *guest.Client
	meta     *images.Meta
	lease    *images.Lease
	address  string // the build VM's link on a node with networking
	cardless bool   // a machine with no network card
}

// cleanup runs after the steps (and their undo, if one failed): the agent
// connection, the memory, and last the VM's folder (the undo stopped the
// VM through its sockets; the image keeps what it needs).
func (w *warmRun) cleanup() {
	if w.c != nil {
		w.c.Close()
	}
	if w.release != nil {
		w.release()
	}
	if w.address != "" {
		if err := w.n.opts.Network.Detach(w.address); err != nil {
			w.n.log.Warn("warm build: release its link", "address", w.address, "err", err)
		}
	}
	os.RemoveAll(w.dir)
}

func (w *warmRun) reserve(_ context.Context, _ *rollback.Stack) (err error) {
	w.release, err = w.n.budget.Reserve(w.size.MemoryMiB, 1)
	return err
}

func (w *warmRun) prepare(_ context.Context, _ *rollback.Stack) error {
	os.RemoveAll(w.dir) // a build interrupted by a restart starts again
	n, tpl, size := w.n, w.tpl, w.size
	w.spec = vmm.Spec{
		ID: "warm-" + filepath.Base(w.dir), Dir: filepath.Join(w.dir, "vm"),
		Kernel: tpl.Kernel, Initrd: tpl.Initrd, KernelArgs: tpl.KernelArgs, BaseDisk: tpl.BaseDisk,
		Disk:    filepath.Join(w.dir, n.opts.Driver.DiskFile("disk")),
		DiskMiB: size.DiskMiB, MemoryMiB: size.MemoryMiB, VCPUs: size.VCPUs, MAC: sandbox.NewMAC(),
	}
	switch {
	case w.cardless:
		w.spec.NoNIC = true
	case n.opts.Network != nil:
		// The image's card must be the kind its sandboxes get: a guest that
		// negotiated a user-mode card's features does not load on a TAP
		// (QEMU refuses the state). The link has no firewall chain: the
		// build reaches nothing, as on a node without networking.
		l, err := n.opts.Network.Allocate()
		if err != nil {
			return fmt.Errorf("%v: %w", err, errdefs.ErrNodeFull)
		}
		w.address = l.Guest.String()
		w.spec.NIC = &vmm.NIC{TAP: l.TAP, MAC: w.spec.MAC}
	}
	return os.MkdirAll(w.spec.Dir, 0o700)
}

func (w *warmRun) boot(ctx context.Context, undo *rollback.Stack) (err error) {
	n := w.n
	w.progress("booting the template")
	if w.h, err = n.opts.Driver.Start(ctx, w.spec); err != nil {
		return err
	}
	h := w.h
	undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, h) })
	writeHandleFile(w.spec.Dir, h) // for sweepWarm, should zeishd die now
	if w.c, err = n.agents.Connect(ctx, h); err != nil {
		return fmt.Errorf("%w (console: %s)", err, n.opts.Driver.ConsoleTail(h, 512))
	}
	return nil
}

func (w *warmRun) configure(ctx context.Context, _ *rollback.Stack) error {
	cfg := freshConfig("warm")
	if w.address != "" {
		cfg.Network = w.n.links.Link(w.address, w.spec.MAC)
	}
	applyTemplate(&w.tpl, &cfg)
	if len(cfg.StartCmd) > 0 {
		w.progress(fmt.Sprintf("starting %q", cfg.StartCmd))
	}
	return w.c.Configure(ctx, cfg)
}

// ready waits for the ready command, then for the guest's own boot work
// (growing the root file system to the disk), which would otherwise go on
// in every sandbox started from the image, writing pages each then owns.
func (w *warmRun) ready(ctx context.Context, _ *rollback.Stack) error {
	if len(w.tpl.ReadyCmd) > 0 {
		w.progress(fmt.Sprintf("waiting for %q to succeed", w.tpl.ReadyCmd))
		bound := DefaultReadyTimeout
		if w.tpl.ReadyTimeoutSeconds > 0 {
			bound = time.Duration(w.tpl.ReadyTimeoutSeconds) * time.Second
		}
		rctx, cancel := context.WithTimeout(ctx, bound)
		err := waitReady(rctx, w.c, w.tpl.ReadyCmd)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := waitBootWork(ctx, w.c); err != nil {
		return err
	}
	w.c.Close()
	w.c = nil
	return nil
}

func (w *warmRun) capture(ctx context.Context, undo *rollback.Stack) error {
	n := w.n
	w.progress("saving the machine")
	imgID, imgDir, lease, err := n.images.Create()
	if err != nil {
		return err
	}
	w.lease = lease
	undo.Add(func(context.Context) error { lease.Release(); return os.RemoveAll(imgDir) })
	img, _, err := n.opts.Driver.Capture(ctx, w.h, imgDir, false)
	if err != nil {
		return err
	}
	undo.Add(func(context.Context) error { return n.opts.Driver.DiscardImage(imgDir, img) })
	w.meta = &images.Meta{ID: imgID, SandboxID: w.tpl.ID, Template: templateKey(w.tpl), VM: img, Disk: n.images.LayerPath(imgID), CreatedAt: time.Now().UTC()}
	return nil
}

// record keeps the disk as the image's layer and writes the image's
// metadata: from here on the image is complete.
func (w *warmRun) record(_ context.Context, _ *rollback.Stack) error {
	if err := os.Rename(w.h.Disk, w.meta.Disk); err != nil {
		return fmt.Errorf("keep the disk: %w", err)
	}
	images.ReadOnly(w.meta.Disk)
	if err := w.n.images.Write(w.meta); err != nil {
		return err
	}
	w.n.images.Publish(w.meta)
	return nil
}

// CollectImages removes the images nothing needs any more: a deleted warm
// template's, once no sandbox started from it is left.
func (n *Node) CollectImages(ctx context.Context) {
	n.ready.Prune(ctx) // VMs of a deleted template go first: they lease its image
	n.images.Collect(ctx)
}

// bootWork names the processes the guest's init starts at boot and that
// end on their own (cmd/sandboxd: growRootFS).
var bootWork = []string{"resize2fs"}

// waitBootWork waits (up to a minute) until none of bootWork runs.
func waitBootWork(ctx context.Context, c *guest.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		procs, err := c.Processes(ctx)
		if err != nil {
			return fmt.Errorf("list guest processes: %w", err)
		}
		busy := slices.ContainsFunc(procs, func(p guest.Process) bool {
			return slices.ContainsFunc(bootWork, func(name string) bool {
				return filepath.Base(p.Command) == name || (len(p.Argv) > 0 && filepath.Base(p.Argv[0]) == name)
			})
		})
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // save it anyway: sandboxes finish the work themselves
		case <-time.After(warmPoll):
		}
	}
}

// waitReady runs argv until it exits 0 or ctx ends; the error then carries
// the last attempt's output.
func waitReady(ctx context.Context, c *guest.Client, argv []string) error {
	var last string
	for {
		var out limitedBuffer
		res, err := c.Exec(ctx, guest.ExecRequest{Argv: argv, Timeout: 30 * time.Second}, nil, &out, &out)
		switch {
		case err == nil && res.ExitCode == 0:
			return nil
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("exit %d: %s", res.ExitCode, out.String())
		}
		select {
		case <-ctx.Done():
			if last == "" {
				last = "none finished"
			}
			return fmt.Errorf("ready command %q did not succeed in time (last try: %s): %w", argv, last, errdefs.ErrTimeout)
		case <-time.After(warmPoll):
		}
	}
}

// limitedBuffer keeps the first 1 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 1024 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// sweepWarm ends the warm builds a previous zeishd left (the catalog builds
// those templates again from scratch): their VMMs, RAM files and folders.
func (n *Node) sweepWarm(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(n.opts.DataDir, "warm", "*"))
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "vm", handleFile)); err == nil {
			var h vmm.Handle
			if json.Unmarshal(b, &h) == nil {
				n.log.Warn("recover: ending an interrupted warm build", "dir", d, "pid", h.PID)
				n.opts.Driver.Destroy(ctx, &h)
			}
		}
		os.RemoveAll(d)
	}
}

// warmImage returns the warm image r can start from, or "" and why not.
func (n *Node) warmImage(r *store.SandboxRecord, tpl sandbox.Template) (*images.Meta, string) {
	w := tpl.Warm
	switch {
	case w == nil:
		return nil, ""
	case tpl.Cold:
		return nil, "the template is cold"
	case r.VCPUs != w.VCPUs || r.MemoryMiB != w.MemoryMiB || r.DiskMiB != w.DiskMiB:
		return nil, fmt.Sprintf("its size differs from the warm image's (%d vCPU, %d MiB, %d MiB disk)", w.VCPUs, w.MemoryMiB, w.DiskMiB)
	case cardlessRecord(r):
		meta, err := n.cardlessImage(tpl)
		if err != nil {
			return nil, whyNoCardless
		}
		return meta, ""
	}
	meta, err := n.images.ReadMachine(w.Image)
	if err != nil {
		return nil, fmt.Sprintf("the warm image is unreadable: %v", err)
	}
	return meta, ""
}
