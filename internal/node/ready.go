package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Ready VMs. A create from a warm template is a fork child's start, and
// most of what it waits for under TCG does not depend on the sandbox at
// all: launching QEMU (~250 ms: linking, machine setup, reading the
// kernel), loading the image's device state, connecting to the agent, and
// the guest's first run through the code of a configure and an exec, which
// a new VMM must translate before it runs (~300 ms, every VMM anew). So
// the node keeps, for each warm template used lately, VMs that have done
// all that: started from the warm image for a placeholder sandbox id,
// agent connected, configured with a placeholder identity and one `true`
// run. A create of the template's warm size takes one: the driver renames
// its folder to the sandbox's and links its disk (vmm.Driver.Adopt), the
// node takes over its agent connection, and the guest is re-identified as
// any warm create is (hostname, clock, entropy, env, secrets, network),
// so nothing of the placeholder remains. A create that finds none starts
// from the image as before (a miss). A ready VM waits paused: no CPU, no
// guest pages written, its translations kept.
//
// VMs are kept by kind: a template, and whether the sandbox has a network
// card. A create with `network: {enabled: false}` takes a VM with no card,
// launched from the template's card-less warm image (cardless.go), which
// the pool builds first the first time such a create asks for one; each
// kind is kept only while used.
//
// Until a create takes it, a ready VM is nobody's: on a node with
// networking its link (whose address the sandbox that takes it gets) has
// no firewall chain yet, so nothing it sends is forwarded and the DNS
// forwarder does not answer it. It costs QEMU's own memory, the pages its
// configuration and warm-up wrote, and pins its image in tmpfs; so VMs are
// kept only for templates used (built, or a warm create) within the idle
// time (ZEISH_COLD_AFTER, 10 min without one), and are destroyed with
// their template, at node close, and after a crash by the recovery's
// sweep (their placeholder ids are no sandbox's).

// DefaultReadyWarmup are the execs a ready VM tries, in turn, until one
// runs, as the template's exec user, to take the guest through sandboxd's
// and the kernel's exec paths: `true` (what a first exec often is, and a
// small program: its pages are copies the sandbox keeps), else the
// agent's own binary printing its version (every image has it; any user
// may run /proc/self/exe), a Go program that writes a few MiB more.
var DefaultReadyWarmup = [][]string{{"true"}, {"/proc/self/exe", "-version"}}

// readyTick is how often the keeper checks its templates when nothing
// kicks it (a build that just finished, an idle template).
const readyTick = 5 * time.Second

// readyRetry is how long the keeper leaves a template alone after a ready
// VM of it failed to start, rather than start VMs in a loop.
const readyRetry = time.Minute

// readyKind is what a create asks a ready VM to be: of a template, with
// or without a network card.
type readyKind struct {
	template string // the template's key (a record's Template)
	cardless bool   // no network card (network: {enabled: false})
}

func kindOf(r *store.SandboxRecord) readyKind {
	return readyKind{template: r.Template, cardless: cardlessRecord(r)}
}

// readyVM is one VM launched ahead for a template.
type readyVM struct {
	kind    readyKind
	image   string // its warm image (the card-less one for a card-less kind)
	h       *vmm.Handle
	c       *guest.Client // its agent, connected
	address string        // its link's guest address on a node with networking
	lease   *images.Lease // the image, while the VM maps it
}

// readyPool keeps ready VMs per template (Options.ReadyVMs of each).
type readyPool struct {
	n      *Node
	per    int
	idle   time.Duration
	warmup [][]string // the execs a ready VM tries until one runs
	kick   chan struct{}

	mu      sync.Mutex
	vms     map[readyKind][]*readyVM // ready, by kind
	claimed map[string]*readyVM      // taken by a create whose boot has not adopted it yet, by sandbox
	handed  map[string]*guest.Client // agents of adopted VMs, until the sandbox's attach takes them
	used    map[readyKind]time.Time  // kinds to keep VMs for, by when last used
	failed  map[readyKind]time.Time  // kinds whose last ready VM failed to start, by when
	// Warm images whose card-less twin failed to build (a template whose
	// start or ready command needs the network, say): not tried again for
	// that image, since each try is a whole warm build; until zeishd
	// restarts, its card-less creates boot cold.
	cardlessFailed map[string]error

	hits, misses atomic.Int64
}

func newReadyPool(n *Node) *readyPool {
	idle := n.opts.ColdAfter
	if idle <= 0 {
		idle = 10 * time.Minute
	}
	warmup := n.opts.ReadyWarmup
	if len(warmup) == 0 {
		warmup = DefaultReadyWarmup
	}
	return &readyPool{n: n, per: n.opts.ReadyVMs, idle: idle, warmup: warmup, kick: make(chan struct{}, 1),
		vms: map[readyKind][]*readyVM{}, claimed: map[string]*readyVM{}, handed: map[string]*guest.Client{}, used: map[readyKind]time.Time{}, failed: map[readyKind]time.Time{},
		cardlessFailed: map[string]error{}}
}

// start runs the keeper until the node closes. Call it after recovery, so
// that no ready VM is mistaken for an orphan by the sweep.
func (p *readyPool) start() {
	if p.per <= 0 {
		return
	}
	p.n.wg.Add(1)
	go func() {
		defer p.n.wg.Done()
		p.keep(p.n.life)
	}()
}

// wake makes the keeper look at once.
func (p *readyPool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// note says a kind was used (a warm create, a build that finished, a
// card-less create of a warm template): from now on VMs are kept ready
// for it.
func (p *readyPool) note(k readyKind) {
	if p.per <= 0 || k.template == "" {
		return
	}
	p.mu.Lock()
	p.used[k] = time.Now()
	p.mu.Unlock()
}

// take gives a new sandbox r a ready VM of its kind and size, if one
// waits; the sandbox's boot adopts it (adopt). On a node with networking
// the VM's link is the sandbox's: r takes its address.
func (p *readyPool) take(r *store.SandboxRecord) *readyVM {
	if p.per <= 0 {
		return nil
	}
	k := kindOf(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.vms[k]
	i := slices.IndexFunc(list, func(v *readyVM) bool {
		s := v.h.Spec
		return s.VCPUs == r.VCPUs && s.MemoryMiB == r.MemoryMiB && s.DiskMiB == r.DiskMiB
	})
	if i < 0 {
		return nil
	}
	v := list[i]
	p.vms[k] = slices.Delete(list, i, i+1)
	p.claimed[r.ID] = v
	return v
}

// drop destroys the ready VM sandbox id took at its create, if it took
// one and nothing adopted it (the create or boot failed first); withLink
// also gives its link back, when the sandbox never took its address.
func (p *readyPool) drop(id string, withLink bool) {
	if v := p.claimedBy(id); v != nil {
		p.destroy(v, withLink)
	}
}

// claimedBy is the ready VM sandbox id took at its create, and forgets it:
// from here on the caller owns it (adopts or destroys it).
func (p *readyPool) claimedBy(id string) *readyVM {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.claimed[id]
	delete(p.claimed, id)
	return v
}

// count reports the ready VMs and the creates that found one or not.
func (p *readyPool) count() (ready int, hits, misses int64) {
	p.mu.Lock()
	for _, l := range p.vms {
		ready += len(l)
	}
	p.mu.Unlock()
	return ready, p.hits.Load(), p.misses.Load()
}

// keep fills and trims the pool until ctx ends, then destroys what it holds.
func (p *readyPool) keep(ctx context.Context) {
	tick := time.NewTicker(readyTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.closeAll()
			return
		case <-p.kick:
		case <-tick.C:
		}
		p.round(ctx)
	}
}

// round trims kinds idle too long or gone, then fills the others, one
// VM at a time (a launch takes a core for a while; a create waiting for
// one should not wait for all).
func (p *readyPool) round(ctx context.Context) {
	p.mu.Lock()
	var want []readyKind
	for k, at := range p.used {
		if time.Since(at) > p.idle {
			delete(p.used, k)
			continue
		}
		want = append(want, k)
	}
	p.mu.Unlock()
	if p.trim(ctx, want) > 0 {
		p.n.images.Collect(ctx) // their images may have waited only for them
	}
	for _, key := range want {
		for ctx.Err() == nil {
			p.mu.Lock()
			short := len(p.vms[key]) < p.per && p.used[key] != (time.Time{}) && time.Since(p.failed[key]) > readyRetry
			p.mu.Unlock()
			if !short {
				break
			}
			tpl, ok := p.warmTemplate(ctx, key.template)
			if !ok {
				break // not (yet, or any more) warm: trim drops its VMs next round
			}
			// Its image (built first for a card-less kind), then the VM.
			img, err := p.image(ctx, key, tpl)
			var v *readyVM
			if err == nil {
				v, err = p.launch(ctx, key, tpl, img)
			}
			if err != nil {
				if ctx.Err() == nil {
					p.n.log.Warn("ready vm", "template", key.template, "cardless", key.cardless, "err", err, "retry_in", readyRetry)
					p.mu.Lock()
					p.failed[key] = time.Now()
					p.mu.Unlock()
				}
				break
			}
			// Kept only if its template is still warm with that image, checked
			// under the lock trim reads the pool with: a delete in between
			// either finds it here or is seen here.
			p.mu.Lock()
			keep := p.current(ctx, key, v.image)
			if keep {
				p.vms[key] = append(p.vms[key], v)
			}
			p.mu.Unlock()
			if !keep {
				p.destroy(v, true)
				p.n.images.Collect(ctx)
				break
			}
		}
	}
}

// warmTemplate is template key, if it is (still) warm.
func (p *readyPool) warmTemplate(ctx context.Context, key string) (sandbox.Template, bool) {
	tpl, err := p.n.opts.Templates.Get(ctx, key)
	return tpl, err == nil && tpl.Warm != nil && !tpl.Cold && tpl.State != sandbox.TemplateDeleted
}

// imageOf is the image VMs of kind k of warm template tpl start from
// ("": none yet).
func (p *readyPool) imageOf(k readyKind, tpl sandbox.Template) string {
	if k.cardless {
		return p.n.images.Twin(tpl.Warm.Image)
	}
	return tpl.Warm.Image
}

// current says whether image is (still) the one VMs of kind k start from.
func (p *readyPool) current(ctx context.Context, k readyKind, image string) bool {
	tpl, ok := p.warmTemplate(ctx, k.template)
	return ok && p.imageOf(k, tpl) == image
}

// image is the image VMs of kind k of tpl start from, built first for a
// card-less kind whose template has none yet (a warm build: seconds to
// minutes, during which the pool fills nothing else).
func (p *readyPool) image(ctx context.Context, k readyKind, tpl sandbox.Template) (*images.Meta, error) {
	if !k.cardless {
		return p.n.images.ReadMachine(tpl.Warm.Image)
	}
	if meta, err := p.n.cardlessImage(tpl); err == nil {
		return meta, nil
	}
	p.mu.Lock()
	failed := p.cardlessFailed[tpl.Warm.Image]
	p.mu.Unlock()
	if failed != nil {
		return nil, fmt.Errorf("not tried again: %w", failed)
	}
	if err := p.n.makeCardless(ctx, tpl); err != nil {
		if ctx.Err() == nil {
			p.mu.Lock()
			p.cardlessFailed[tpl.Warm.Image] = err
			p.mu.Unlock()
		}
		return nil, err
	}
	return p.n.cardlessImage(tpl)
}

// trim destroys the ready VMs of kinds not in keep, or whose template is
// no longer warm with the same image, and says how many went; the caller
// collects the images they may have kept.
func (p *readyPool) trim(ctx context.Context, keep []readyKind) int {
	p.mu.Lock()
	var drop []*readyVM
	for key, list := range p.vms {
		if !slices.Contains(keep, key) {
			drop = append(drop, list...)
			delete(p.vms, key)
		}
	}
	p.mu.Unlock()
	for _, key := range keep {
		p.mu.Lock()
		list := p.vms[key]
		p.mu.Unlock()
		if len(list) == 0 {
			continue
		}
		if p.current(ctx, key, list[0].image) {
			continue
		}
		p.mu.Lock()
		drop = append(drop, p.vms[key]...)
		delete(p.vms, key)
		delete(p.used, key)
		p.mu.Unlock()
	}
	for _, v := range drop {
		p.destroy(v, true)
	}
	return len(drop)
}

// kinds are the ones VMs are kept for.
func (p *readyPool) kinds() []readyKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []readyKind
	for k := range p.used {
		out = append(out, k)
	}
	return out
}

// launch starts one ready VM of kind key from meta, tpl's warm image (or
// its card-less one) as image reads it, left paused, for a placeholder sandbox id, in the
// folder such a sandbox's first VM would have (so that a crash leaves
// nothing the recovery's sweep misses).
func (p *readyPool) launch(ctx context.Context, key readyKind, tpl sandbox.Template, meta *images.Meta) (_ *readyVM, err error) {
	n := p.n
	// A ready VM holds no promise of memory (it writes a few MiB), but is
	// kept only while a sandbox of its size would fit: it never crowds out
	// a create on a full node.
	release, err := n.reserve(&store.SandboxRecord{Sandbox: sandbox.Sandbox{MemoryMiB: tpl.Warm.MemoryMiB}}, 1)
	if err != nil {
		return nil, err
	}
	release()
	id := sandbox.NewID(sandbox.PrefixSandbox)
	dir := filepath.Join(n.sandboxDir(id), "vm-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	v := &readyVM{kind: key, image: meta.ID, lease: n.images.Lease(meta.ID)}
	defer func() {
		if err != nil {
			p.destroy(v, true)
		}
	}()
	spec := vmm.Spec{ID: id, Dir: dir,
		Kernel: tpl.Kernel, Initrd: tpl.Initrd, KernelArgs: tpl.KernelArgs, BaseDisk: meta.Disk,
		Disk:    n.diskPath(id, 1),
		DiskMiB: tpl.Warm.DiskMiB, MemoryMiB: tpl.Warm.MemoryMiB, VCPUs: tpl.Warm.VCPUs, MAC: sandbox.NewMAC(),
		From: meta.VM}
	// The placeholder's network: none for a card-less kind, its own link,
	// or an identity like any sandbox's on a node without networking.
	var network *guest.Network
	switch {
	case key.cardless:
		spec.NoNIC = true
	case n.opts.Network != nil:
		l, err := n.opts.Network.Allocate()
		if err != nil {
			return nil, err
		}
		v.address = l.Guest.String()
		spec.NIC = &vmm.NIC{TAP: l.TAP, MAC: spec.MAC}
		network = n.linkNetwork(v.address, spec.MAC)
	default:
		network = n.guestNetwork(&store.SandboxRecord{Sandbox: sandbox.Sandbox{Address: newAddress()}, MAC: spec.MAC})
	}
	if err := n.images.Thaw(ctx, meta.VM); err != nil {
		return nil, err
	}
	began := time.Now()
	if v.h, err = n.opts.Driver.Start(ctx, spec); err != nil {
		return nil, err
	}
	started := time.Now()
	if v.c, err = n.connectAgent(ctx, v.h); err != nil {
		return nil, err
	}
	cfg := freshConfig("ready")
	cfg.Network = network
	applyTemplate(&tpl, &cfg)
	if err := v.c.Configure(ctx, cfg); err != nil {
		return nil, fmt.Errorf("configure: %w", err)
	}
	configured := time.Now()
	for i, argv := range p.warmup {
		_, err := v.c.Exec(ctx, guest.ExecRequest{Argv: argv}, nil, io.Discard, io.Discard)
		if err == nil {
			break
		}
		if i == len(p.warmup)-1 || !errdefs.Is(err, errdefs.ClassNotFound) {
			return nil, fmt.Errorf("warm-up exec %q: %w", argv, err)
		}
	}
	// Paused until a create takes it: it costs no CPU and writes no pages
	// meanwhile, and QEMU keeps what it translated. (The agent session has
	// no keepalive to miss.)
	if err := n.opts.Driver.Pause(ctx, v.h); err != nil {
		return nil, err
	}
	n.log.Info("ready vm", "template", key.template, "cardless", key.cardless, "as", id, "start_ms", started.Sub(began).Milliseconds(),
		"configure_ms", configured.Sub(started).Milliseconds(), "exec_ms", time.Since(configured).Milliseconds())
	return v, nil
}

// destroy ends a ready VM nobody adopted; withLink also gives its link
// back (false when a sandbox took its address).
func (p *readyPool) destroy(v *readyVM, withLink bool) {
	ctx := context.WithoutCancel(p.n.life)
	if v.c != nil {
		v.c.Close()
	}
	if v.h != nil {
		if err := p.n.opts.Driver.Destroy(ctx, v.h); err != nil {
			p.n.log.Warn("ready vm: destroy", "as", v.h.Spec.ID, "err", err)
		}
		os.RemoveAll(filepath.Dir(v.h.Spec.Dir))
	}
	if withLink && v.address != "" {
		if err := p.n.opts.Network.Detach(v.address); err != nil {
			p.n.log.Warn("ready vm: release link", "address", v.address, "err", err)
		}
	}
	if v.lease != nil {
		v.lease.Release()
	}
}

// closeAll destroys every ready VM: they are no sandbox's, and a
// restarted zeishd would only sweep them.
func (p *readyPool) closeAll() {
	p.mu.Lock()
	var all []*readyVM
	for _, l := range p.vms {
		all = append(all, l...)
	}
	p.vms = map[readyKind][]*readyVM{}
	p.mu.Unlock()
	for _, v := range all {
		p.destroy(v, true)
	}
	// Images only ready VMs kept (a template deleted while one was being
	// made, or one whose making the close cut short) go now, not at the
	// next start.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.n.images.Collect(ctx)
}

// adoptReady gives sandbox r the ready VM its create took, if it took one
// for this very image: spec is the VM r's boot asks for. The VM is
// resumed; its agent connection waits for r's attach (handedOver). It
// returns nil, nil when there is none to adopt (the caller starts a VM).
func (n *Node) adoptReady(ctx context.Context, r *store.SandboxRecord, spec vmm.Spec) (*vmm.Handle, error) {
	v := n.ready.claimedBy(r.ID)
	if spec.From == nil || spec.From.MemFile == "" || spec.Deferred {
		if v != nil {
			n.ready.destroy(v, false)
		}
		return nil, nil
	}
	if v == nil || v.image != filepath.Base(spec.From.Dir) {
		if v != nil {
			n.ready.destroy(v, false)
		}
		n.ready.misses.Add(1)
		return nil, nil
	}
	defer v.lease.Release() // the boot holds its own lease on the image
	v.lease = nil
	placeholder := filepath.Dir(v.h.Spec.Dir)
	h, err := n.opts.Driver.Adopt(ctx, v.h, spec)
	if err != nil {
		n.ready.destroy(v, false)
		return nil, err
	}
	os.Remove(placeholder) // empty now: its VM folder and disk moved
	if err := n.opts.Driver.Resume(ctx, h); err != nil {
		v.c.Close()
		return nil, errors.Join(err, n.opts.Driver.Destroy(context.WithoutCancel(ctx), h))
	}
	n.ready.mu.Lock()
	n.ready.handed[r.ID] = v.c
	n.ready.mu.Unlock()
	n.ready.hits.Add(1)
	return h, nil
}

// handedOver is the agent connection of the ready VM sandbox id adopted
// (nil: none), for its attach; from then on it is the caller's.
func (p *readyPool) handedOver(id string) *guest.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.handed[id]
	delete(p.handed, id)
	return c
}
