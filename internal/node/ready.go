package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/node/ready"
	"github.com/zeish/zeish/internal/node/sandboxnet"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Ready VMs (internal/node/ready keeps them; the node launches, adopts and
// ends them). A ready VM is started from a warm template's image for a
// placeholder sandbox id, agent connected, configured with a placeholder
// identity and one warm-up exec run, then paused. A create of the
// template's warm size takes one: the driver renames its folder to the
// sandbox's and links its disk (vmm.Driver.Adopt), the node takes over its
// agent connection, and the guest is re-identified as any warm create is
// (hostname, clock, entropy, env, secrets, network), so nothing of the
// placeholder remains.
//
// A create with `network: {enabled: false}` takes a VM with no card,
// launched from the template's card-less warm image (cardless.go), which
// is built first the first time such a create asks for one.
//
// Until a create takes it, a ready VM is nobody's: on a node with
// networking its link (whose address the sandbox that takes it gets) has
// no firewall chain yet, so nothing it sends is forwarded and the DNS
// forwarder does not answer it. It costs QEMU's own memory, the pages its
// configuration and warm-up wrote, and leases its image in tmpfs; so VMs
// are kept only for templates used (built, or a warm create) within the
// idle time (ZEISH_COLD_AFTER, 10 min without one), and are destroyed
// with their template, at node close, and after a crash by the recovery's
// sweep (their placeholder ids are no sandbox's).

// DefaultReadyWarmup are the execs a ready VM tries, in turn, until one
// runs, as the template's exec user, to take the guest through sandboxd's
// and the kernel's exec paths: `true` (what a first exec often is, and a
// small program: its pages are copies the sandbox keeps), else the
// agent's own binary printing its version (every image has it; any user
// may run /proc/self/exe), a Go program that writes a few MiB more.
var DefaultReadyWarmup = [][]string{{"true"}, {"/proc/self/exe", "-version"}}

// readyKind is the kind of ready VM a create of r takes.
func readyKind(r *store.SandboxRecord) ready.Kind {
	return ready.Kind{Template: r.Template, Cardless: cardlessRecord(r)}
}

// newReadyPool makes the node's pool of ready VMs.
func newReadyPool(n *Node) *ready.Pool {
	idle := n.opts.ColdAfter
	if idle <= 0 {
		idle = 10 * time.Minute
	}
	return ready.New(ready.Options{PerKind: n.opts.ReadyVMs, Idle: idle, Host: readyHost{n}, Logger: n.log})
}

// readyHost launches and ends the pool's VMs (ready.Host).
type readyHost struct{ n *Node }

// warmTemplate is the template of kind k, if it is (still) warm.
func (rh readyHost) warmTemplate(ctx context.Context, k ready.Kind) (sandbox.Template, error) {
	tpl, err := rh.n.opts.Templates.Get(ctx, k.Template)
	if err != nil || tpl.Warm == nil || tpl.Cold || tpl.State == sandbox.TemplateDeleted {
		return tpl, fmt.Errorf("template %s: %w", k.Template, ready.ErrNotWarm)
	}
	return tpl, nil
}

func (rh readyHost) Current(ctx context.Context, k ready.Kind) (string, error) {
	tpl, err := rh.warmTemplate(ctx, k)
	if err != nil {
		return "", err
	}
	if k.Cardless {
		return rh.n.images.Twin(tpl.Warm.Image), nil
	}
	return tpl.Warm.Image, nil
}

func (rh readyHost) Launch(ctx context.Context, k ready.Kind) (*ready.VM, error) {
	tpl, err := rh.warmTemplate(ctx, k)
	if err != nil {
		return nil, err
	}
	// Its image (built first for a card-less kind), then the VM.
	meta, err := rh.image(ctx, k, tpl)
	if err != nil {
		return nil, err
	}
	return rh.launch(ctx, k, tpl, meta)
}

func (rh readyHost) Collect(ctx context.Context) { rh.n.images.Collect(ctx) }

// image is the image VMs of kind k of tpl start from, built first for a
// card-less kind whose template has none yet (a warm build: seconds to
// minutes, during which the pool fills nothing else).
func (rh readyHost) image(ctx context.Context, k ready.Kind, tpl sandbox.Template) (*images.Meta, error) {
	n := rh.n
	if !k.Cardless {
		return n.images.ReadMachine(tpl.Warm.Image)
	}
	if meta, err := n.cardlessImage(tpl); err == nil {
		return meta, nil
	}
	if err := n.cardless.build(ctx, tpl, n.makeCardless); err != nil {
		return nil, err
	}
	return n.cardlessImage(tpl)
}

// launch starts one ready VM of kind k from meta, tpl's warm image (or its
// card-less one), left paused, for a placeholder sandbox id, in the folder
// such a sandbox's first VM would have (so that a crash leaves nothing the
// recovery's sweep misses).
func (rh readyHost) launch(ctx context.Context, k ready.Kind, tpl sandbox.Template, meta *images.Meta) (*ready.VM, error) {
	n := rh.n
	id := sandbox.NewID(sandbox.PrefixSandbox)
	v := &ready.VM{Kind: k, Image: meta.ID}
	spec := vmm.Spec{ID: id, Dir: filepath.Join(n.sandboxDir(id), "vm-1"),
		Kernel: tpl.Kernel, Initrd: tpl.Initrd, KernelArgs: tpl.KernelArgs, BaseDisk: meta.Disk,
		Disk:    n.diskPath(id, 1),
		DiskMiB: tpl.Warm.DiskMiB, MemoryMiB: tpl.Warm.MemoryMiB, VCPUs: tpl.Warm.VCPUs, MAC: sandbox.NewMAC(),
		From: meta.VM}
	var (
		network                  *guest.Network
		began, started, configed time.Time
	)
	err := rollback.Run(ctx,
		rollback.Step{Name: "room", Do: func(context.Context, *rollback.Stack) error {
			// A ready VM holds no promise of memory (it writes a few MiB), but
			// is kept only while a sandbox of its size would fit: it never
			// crowds out a create on a full node.
			release, err := n.budget.Reserve(tpl.Warm.MemoryMiB, 1)
			if err != nil {
				return err
			}
			release()
			return nil
		}},
		rollback.Step{Name: "folder", Do: func(_ context.Context, undo *rollback.Stack) error {
			if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
				return err
			}
			v.Lease = n.images.Lease(meta.ID)
			// Whatever of the VM was made (its link, VMM, agent, folder) goes.
			undo.Add(func(context.Context) error { rh.Destroy(v, true); return os.RemoveAll(n.sandboxDir(id)) })
			return nil
		}},
		rollback.Step{Name: "network", Do: func(context.Context, *rollback.Stack) (err error) {
			network, err = n.readyNetwork(k, v, &spec)
			return err
		}},
		rollback.Step{Name: "thaw", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.images.Thaw(ctx, meta.VM) }},
		rollback.Step{Name: "start", Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
			began = time.Now()
			v.Handle, err = n.opts.Driver.Start(ctx, spec)
			started = time.Now()
			return err
		}},
		rollback.Step{Name: "agent", Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
			v.Agent, err = n.agents.Connect(ctx, v.Handle)
			return err
		}},
		rollback.Step{Name: "configure", Do: func(ctx context.Context, _ *rollback.Stack) error {
			cfg := freshConfig("ready")
			cfg.Network = network
			applyTemplate(&tpl, &cfg)
			err := v.Agent.Configure(ctx, cfg)
			configed = time.Now()
			return err
		}},
		rollback.Step{Name: "warm-up", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.readyWarmup(ctx, v.Agent) }},
		// Paused until a create takes it: it costs no CPU and writes no pages
		// meanwhile, and QEMU keeps what it translated. (The agent session has
		// no keepalive to miss.)
		rollback.Step{Name: "pause", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.opts.Driver.Pause(ctx, v.Handle) }},
	)
	if err != nil {
		return nil, err
	}
	n.log.Info("ready vm", "template", k.Template, "cardless", k.Cardless, "as", id, "start_ms", started.Sub(began).Milliseconds(),
		"configure_ms", configed.Sub(started).Milliseconds(), "exec_ms", time.Since(configed).Milliseconds())
	return v, nil
}

// readyNetwork gives a ready VM of kind k its placeholder network: none
// for a card-less kind, its own link, or an identity like any sandbox's
// on a node without networking.
func (n *Node) readyNetwork(k ready.Kind, v *ready.VM, spec *vmm.Spec) (*guest.Network, error) {
	switch {
	case k.Cardless:
		spec.NoNIC = true
		return nil, nil
	case n.opts.Network != nil:
		l, err := n.opts.Network.Allocate()
		if err != nil {
			return nil, err
		}
		v.Address = l.Guest.String()
		spec.NIC = &vmm.NIC{TAP: l.TAP, MAC: spec.MAC}
		return n.links.Link(v.Address, spec.MAC), nil
	}
	return n.links.Guest(&store.SandboxRecord{Sandbox: sandbox.Sandbox{Address: sandboxnet.NewAddress()}, MAC: spec.MAC}), nil
}

// readyWarmup runs the warm-up execs in turn until one runs.
func (n *Node) readyWarmup(ctx context.Context, c *guest.Client) error {
	warmup := n.opts.ReadyWarmup
	if len(warmup) == 0 {
		warmup = DefaultReadyWarmup
	}
	for i, argv := range warmup {
		_, err := c.Exec(ctx, guest.ExecRequest{Argv: argv}, nil, io.Discard, io.Discard)
		if err == nil {
			return nil
		}
		if i == len(warmup)-1 || !errdefs.Is(err, errdefs.ClassNotFound) {
			return fmt.Errorf("warm-up exec %q: %w", argv, err)
		}
	}
	return nil
}

// Destroy ends a ready VM nobody adopted; withLink also gives its link
// back (false when a sandbox took its address).
func (rh readyHost) Destroy(v *ready.VM, withLink bool) {
	n := rh.n
	ctx := context.WithoutCancel(n.life)
	if v.Agent != nil {
		v.Agent.Close()
	}
	if v.Handle != nil {
		if err := n.opts.Driver.Destroy(ctx, v.Handle); err != nil {
			n.log.Warn("ready vm: destroy", "as", v.Handle.Spec.ID, "err", err)
		}
		os.RemoveAll(filepath.Dir(v.Handle.Spec.Dir))
	}
	if withLink && v.Address != "" {
		if err := n.opts.Network.Detach(v.Address); err != nil {
			n.log.Warn("ready vm: release link", "address", v.Address, "err", err)
		}
	}
	v.Lease.Release()
}

// adoptReady gives sandbox r the ready VM its create took, if it took one
// for this very image: spec is the VM r's boot asks for. The VM is
// resumed; its agent connection waits for r's attach (ready.Pool.HandedOver). It
// returns nil, nil when there is none to adopt (the caller starts a VM).
func (n *Node) adoptReady(ctx context.Context, r *store.SandboxRecord, spec vmm.Spec) (*vmm.Handle, error) {
	v := n.ready.Claimed(r.ID)
	fromImage := spec.From != nil && spec.From.MemFile != "" && !spec.Deferred
	switch {
	case v == nil:
		if fromImage {
			n.ready.Missed()
		}
		return nil, nil
	case !fromImage:
		readyHost{n}.Destroy(v, false)
		return nil, nil
	case v.Image != filepath.Base(spec.From.Dir):
		readyHost{n}.Destroy(v, false)
		n.ready.Missed()
		return nil, nil
	}
	defer v.Lease.Release() // the boot holds its own lease on the image
	v.Lease = nil
	var h *vmm.Handle
	err := rollback.Run(ctx,
		rollback.Step{Name: "adopt", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			undo.Add(func(context.Context) error { readyHost{n}.Destroy(v, false); return nil })
			placeholder := filepath.Dir(v.Handle.Spec.Dir)
			if h, err = n.opts.Driver.Adopt(ctx, v.Handle, spec); err != nil {
				return err
			}
			os.Remove(placeholder) // empty now: its VM folder and disk moved
			undo.Release()         // the VM is h now, in the sandbox's folder
			undo.Add(func(ctx context.Context) error { v.Agent.Close(); return n.opts.Driver.Destroy(ctx, h) })
			return nil
		}},
		rollback.Step{Name: "resume", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.opts.Driver.Resume(ctx, h) }},
	)
	if err != nil {
		return nil, err
	}
	n.ready.HandOver(r.ID, v.Agent)
	return h, nil
}
