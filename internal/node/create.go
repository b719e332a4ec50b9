package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/gitws"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Create records a new sandbox in state starting and boots it in the
// background. r comes validated from the API edge (name, size, template, env);
// Create fills in what the node owns: host, hostname, MAC, address, and the
// id unless the caller chose it (a control plane does: it seals the
// sandbox's secrets for that id, see internal/cluster).
func (n *Node) Create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	now := time.Now().UTC()
	if r.ID == "" {
		r.ID = sandbox.NewID(sandbox.PrefixSandbox)
	}
	picked := r.Name == ""
	if picked {
		r.Name = n.opts.Names()
	}
	r.Hostname = r.Name
	r.Host = n.opts.ID
	r.Region = n.opts.Region
	if has := string(n.opts.Driver.Capabilities().Accel); r.Accel != "" && r.Accel != has {
		return nil, fmt.Errorf("accel %s asked for, this node runs %s: %w", r.Accel, has, errdefs.ErrNodeFull)
	}
	r.Accel = string(n.opts.Driver.Capabilities().Accel)
	r.State = sandbox.StateStarting
	r.CreatedAt, r.UpdatedAt = now, now
	r.MAC = sandbox.NewMAC()
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	release, readyAddr := func() {}, ""
	defer func() { release() }() // the record counts the memory from its write on
	// Its refusals are the client's (network, room, names): as they are.
	err := rollback.Run(ctx,
		rollback.Step{Name: "ready VM", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) error {
			taken := n.ready.Take(r.ID, readyKind(r), sandbox.Size{VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, DiskMiB: r.DiskMiB})
			if taken == nil {
				return nil
			}
			// The card and link the ready VM's guest was configured with: its
			// reconfiguration then changes neither.
			r.MAC, readyAddr = taken.Handle.Spec.MAC, taken.Address
			undo.Add(func(context.Context) error { n.ready.Drop(r.ID, true); return nil })
			return nil
		}},
		rollback.Step{Name: "network", AsIs: true, Do: func(_ context.Context, undo *rollback.Stack) error {
			if err := n.links.Assign(r, readyAddr); err != nil {
				return err
			}
			undo.Add(func(context.Context) error {
				n.ready.Drop(r.ID, false) // before its link goes with the sandbox's
				return n.links.Release(r)
			})
			return nil
		}},
		rollback.Step{Name: "memory", AsIs: true, Do: func(context.Context, *rollback.Stack) error {
			rel, err := n.budget.Reserve(r.MemoryMiB, 1)
			if err != nil {
				return err // no release: a refused reservation holds nothing
			}
			release = rel
			return nil
		}},
		rollback.Step{Name: "template", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			// One built on another node must be fetchable from here.
			if tpl, err := n.opts.Store.GetTemplate(ctx, r.Template); err == nil {
				return n.templateReady(ctx, tpl)
			}
			return nil // the boot says what is wrong with it
		}},
		rollback.Step{Name: "record", AsIs: true, Do: func(ctx context.Context, _ *rollback.Stack) error {
			return n.createRecords(ctx, []bool{picked}, r)
		}},
	)
	if err != nil {
		return nil, err
	}
	n.log.Info("create", logSandbox, r.ID, "name", r.Name, "template", r.Template, "memory_mib", r.MemoryMiB)
	n.run(r.ID, func(ctx context.Context) { n.boot(ctx, r) })
	return r, nil
}

// nameAttempts is how many names createRecords tries for the sandboxes
// whose names it picked.
const nameAttempts = 8

// createRecords writes rs, all or none, like Store.CreateSandboxes. A name
// the node picked (picked[i]) is never the caller's, so its clash with a
// live sandbox (or a sibling) must not fail the call: those records get
// other names, and hostnames, and are written again. Picked names come
// from 81,000 (sandbox.NewName), so an account with a few hundred live
// sandboxes meets clashes often.
func (n *Node) createRecords(ctx context.Context, picked []bool, rs ...*store.SandboxRecord) error {
	for attempt := 1; ; attempt++ {
		err := n.opts.Store.CreateSandboxes(ctx, rs...)
		if err == nil || !errors.Is(err, errdefs.ErrNameTaken) || attempt == nameAttempts || !slices.Contains(picked, true) {
			return err
		}
		for i, r := range rs {
			if picked[i] {
				r.Name = n.opts.Names()
				r.Hostname = r.Name
			}
		}
	}
}

// boot starts the first VM of a new sandbox from its template.
func (n *Node) boot(ctx context.Context, r *store.SandboxRecord) {
	var lease *images.Lease // a warm image, until the record names it
	defer func() { lease.Release() }()
	var clone func(context.Context) error
	if r.GitRepo != "" {
		clone = func(ctx context.Context) error { return n.gitClone(ctx, r) }
	}
	defer func() {
		// What a boot that failed early left of a ready VM it took.
		n.ready.Drop(r.ID, false)
		if c := n.ready.HandedOver(r.ID); c != nil {
			c.Close()
		}
		n.ready.Wake() // a ready VM it took is replaced now that it runs
	}()
	n.bootNew(ctx, r, "boot", clone, func(ctx context.Context, spec *vmm.Spec) error {
		tpl, err := n.opts.Templates.Get(ctx, r.Template)
		if err != nil {
			return fmt.Errorf("template %s: %w: %w", r.Template, errTemplate, err)
		}
		// Built on another node: its files from the image store, once.
		if err := n.localTemplate(ctx, &tpl, r.ID); err != nil {
			return fmt.Errorf("template %s: %w: %w", r.Template, errTemplate, err)
		}
		r.Kernel, r.Initrd, r.KernelArgs = tpl.Kernel, tpl.Initrd, tpl.KernelArgs
		spec.Kernel, spec.Initrd, spec.KernelArgs, spec.BaseDisk = tpl.Kernel, tpl.Initrd, tpl.KernelArgs, tpl.BaseDisk
		meta, why := n.warmImage(r, tpl)
		if meta == nil {
			if why == whyNoCardless {
				n.ready.Note(readyKind(r)) // the pool makes the image, and VMs from it
			}
			if why != "" {
				n.log.Info("boot cold", logSandbox, r.ID, "template", tpl.Name, "why", why)
			}
			return nil
		}
		// A fork of the template's saved machine (warm.go).
		lease = n.images.Lease(meta.ID)
		n.ready.Note(readyKind(r))
		r.Layers = meta.Chain()
		spec.BaseDisk, spec.From = meta.Disk, meta.VM
		n.log.Info("boot warm", logSandbox, r.ID, "template", tpl.Name, "image", meta.ID)
		return nil
	})
}

// bootNew brings up the first VM of a new sandbox, created or forked:
// prepare says what it starts from. It waits for the guest agent, then runs
// checkout (nil: nothing; the git checkout); any failure rolls back every step
// and leaves the sandbox in state error with the reason ("<what> failed: …").
func (n *Node) bootNew(ctx context.Context, r *store.SandboxRecord, what string, checkout func(context.Context) error,
	prepare func(context.Context, *vmm.Spec) error) {
	start := time.Now()
	var (
		console string // the guest's last words, when its agent never answered
		spec    vmm.Spec
		h       *vmm.Handle
	)
	err := rollback.Run(ctx,
		rollback.Step{Name: "folder", Do: func(ctx context.Context, undo *rollback.Stack) error {
			if err := os.MkdirAll(n.sandboxDir(r.ID), 0o700); err != nil {
				return err
			}
			undo.Add(removeDir(n.sandboxDir(r.ID)))
			return nil
		}},
		rollback.Step{Name: "spec", Do: func(ctx context.Context, _ *rollback.Stack) (err error) {
			if spec, err = n.nextVM(ctx, r); err != nil {
				return err
			}
			return prepare(ctx, &spec)
		}},
		rollback.Step{Name: "network", Do: func(ctx context.Context, undo *rollback.Stack) error {
			if err := n.links.Attach(r); err != nil {
				return err
			}
			undo.Add(func(ctx context.Context) error {
				// The sandbox stays (in error) without an address, so that its
				// delete never touches a link handed out again since.
				err := n.links.Release(r)
				r.Address = ""
				_, serr := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), r.ID, func(cur *store.SandboxRecord) error {
					cur.Address = ""
					return nil
				})
				return errors.Join(err, serr)
			})
			return nil
		}},
		rollback.Step{Name: "vm", Do: func(ctx context.Context, undo *rollback.Stack) (err error) {
			h, err = n.startVM(ctx, undo, r, spec)
			return err
		}},
		rollback.Step{Name: "agent", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if err := n.attach(ctx, r.ID, h); err != nil {
				console = n.opts.Driver.ConsoleTail(h, consoleTailBytes)
				return err
			}
			return nil
		}},
		rollback.Step{Name: "git", Do: func(ctx context.Context, _ *rollback.Stack) error {
			if checkout == nil {
				return nil
			}
			return checkout(ctx)
		}},
		rollback.Step{Name: "browser", Do: func(ctx context.Context, _ *rollback.Stack) error { return n.syncBrowser(ctx, r) }},
	)
	if err != nil {
		n.log.Error(what+" failed", logSandbox, r.ID, "err", err)
		msg := what + " failed: " + err.Error()
		if console != "" {
			msg += "\n--- guest console, last lines ---\n" + console
		}
		n.fail(ctx, r.ID, sandbox.OpBootFailed, bootErrorCode(ctx, err), what+" failed: "+err.Error(), msg, nil)
		return
	}
	n.transition(ctx, r.ID, sandbox.OpReady, "", nil)
	n.log.Info("running", logSandbox, r.ID, "after", what, "ms", time.Since(start).Milliseconds())
}

// errTemplate marks a boot that failed for want of its template.
var errTemplate = errors.New("template unavailable")

// consoleTailBytes is how much of a failed guest's console its error keeps.
const consoleTailBytes = 2048

// bootErrorCode classifies why a new sandbox's boot failed.
func bootErrorCode(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, errTemplate):
		return sandbox.ErrTemplateUnavailable
	case errors.As(err, new(*gitws.Error)) || errors.Is(err, gitws.NoGit):
		return sandbox.ErrGitCloneFailed
	case errors.Is(err, errdefs.ErrTimeout):
		return sandbox.ErrBootTimeout
	case ctx.Err() != nil:
		return sandbox.ErrInterrupted
	}
	return sandbox.ErrBootFailed
}

// nextVM prepares the folder of the sandbox's next VM and the spec to start
// it with: a new generation, so files of the VM it replaces (a fork's
// parent, a promotion's source) never clash with the new one's.
func (n *Node) nextVM(ctx context.Context, r *store.SandboxRecord) (vmm.Spec, error) {
	r.Gen++
	dir := filepath.Join(n.sandboxDir(r.ID), fmt.Sprintf("vm-%d", r.Gen))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return vmm.Spec{}, err
	}
	_, err := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), r.ID, func(cur *store.SandboxRecord) error {
		cur.Gen = r.Gen
		return nil
	})
	spec := vmm.Spec{
		ID: r.ID, Dir: dir,
		Kernel: r.Kernel, Initrd: r.Initrd, KernelArgs: r.KernelArgs,
		Disk:    n.diskPath(r.ID, r.Gen),
		DiskMiB: r.DiskMiB, MemoryMiB: r.MemoryMiB, VCPUs: r.VCPUs, MAC: r.MAC,
	}
	n.links.NIC(r, &spec)
	return spec, err
}

// startVM starts spec for r and persists the handle (in the store and beside
// the VM's files, so recovery finds the VM even if the store write is lost).
func (n *Node) startVM(ctx context.Context, undo *rollback.Stack, r *store.SandboxRecord, spec vmm.Spec) (*vmm.Handle, error) {
	if spec.From != nil && spec.From.MemFile != "" {
		// Leased until the VM maps it: the cold sweeper must not move the
		// image back to disk in between.
		defer n.images.Lease(filepath.Base(spec.From.Dir)).Release()
		if err := n.images.Thaw(ctx, spec.From); err != nil {
			return nil, err
		}
	}
	h, err := n.adoptReady(ctx, r, spec)
	if err != nil {
		return nil, err
	}
	if h == nil {
		if h, err = n.opts.Driver.Start(ctx, spec); err != nil {
			return nil, err
		}
	}
	undo.Add(func(ctx context.Context) error { return n.opts.Driver.Destroy(ctx, h) })
	if err := writeHandleFile(spec.Dir, h); err != nil {
		return nil, err
	}
	r.Disk, r.Pristine = h.Disk, false
	if err := n.saveVM(ctx, r, h); err != nil {
		return nil, err
	}
	undo.Add(func(ctx context.Context) error { return n.saveVM(ctx, r, nil) })
	return h, nil
}

// saveVM persists the node-owned fields of r and its VM handle (nil: none).
func (n *Node) saveVM(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle) error {
	if err := r.SetHandle(h); err != nil {
		return err
	}
	_, err := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), r.ID, func(cur *store.SandboxRecord) error {
		cur.Handle, cur.Disk, cur.DiskBase, cur.Layers, cur.ResumeImage, cur.Gen = r.Handle, r.Disk, r.DiskBase, r.Layers, r.ResumeImage, r.Gen
		cur.Pristine = r.Pristine && h != nil
		cur.Kernel, cur.Initrd, cur.KernelArgs = r.Kernel, r.Initrd, r.KernelArgs
		return nil
	})
	if err == nil && h != nil {
		n.merger.Queue(r.ID, len(r.Layers)) // a VM on a chain this deep has its layers merged
	}
	return err
}

// attach connects to the guest agent of a started VM and hands the guest its
// identity (hostname, clock, entropy, network, environment).
func (n *Node) attach(ctx context.Context, id string, h *vmm.Handle) error {
	r, err := n.opts.Store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	defer n.agents.Lock(id)()
	n.agents.Drop(id)
	c := n.ready.HandedOver(id) // an adopted ready VM's, connected already
	if c == nil {
		if c, err = n.agents.Connect(ctx, h); err != nil {
			return err
		}
	}
	cfg := freshConfig(r.Hostname)
	cfg.Env, cfg.Network, cfg.Git = guestEnv(r), n.links.Guest(r), gitAuth(r)
	if r.SecretsUnreadable() {
		n.log.Warn("the sandbox's secrets cannot be opened with this data dir's secrets key; the guest gets none", logSandbox, id)
	}
	n.templateDefaults(ctx, r, &cfg)
	if r.Desktop {
		cfg.Desktop = n.desktopFor(&cfg)
	}
	connected := time.Now()
	defer func() {
		n.log.Debug("guest configured", logSandbox, id, "configure_ms", time.Since(connected).Milliseconds())
	}()
	if err := c.Configure(ctx, cfg); err != nil {
		c.Close()
		return fmt.Errorf("configure guest: %w", err)
	}
	n.agents.Set(id, c)
	return nil
}

// reattach makes sure a running sandbox's agent answers after zeishd
// restarted. The guest already has its identity, so it is not configured
// again, and a connection a data-plane request made meanwhile is kept:
// replacing it would end that request's session under it.
func (n *Node) reattach(ctx context.Context, id string, h *vmm.Handle) error {
	_, err := n.agents.Keep(id, func() (*guest.Client, error) { return n.agents.Connect(ctx, h) })
	return err
}

// freshConfig is a guest's identity at a boot, fork or restore: its
// hostname, the clock now and fresh entropy (at least 32 bytes: the kernel
// counts its RNG seeded at 256 bits).
func freshConfig(hostname string) guest.Config {
	entropy := make([]byte, 64)
	rand.Read(entropy)
	return guest.Config{Hostname: hostname, Time: time.Now().UTC(), Entropy: entropy}
}

// guestEnv is the default environment of every exec: the sandbox's variables
// and its secrets (secrets win on a clash).
func guestEnv(r *store.SandboxRecord) map[string]string {
	env := make(map[string]string, len(r.Env)+len(r.SecretEnv))
	for k, v := range r.Env {
		env[k] = v
	}
	for k, v := range r.SecretEnv {
		env[k] = v
	}
	return env
}
