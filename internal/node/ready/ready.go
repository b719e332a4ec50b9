// Package ready keeps a node's ready VMs: VMs launched ahead from a warm
// template's image, so that a create takes one instead of starting a VMM.
//
// A create from a warm template is a fork child's start, and most of what
// it waits for under TCG does not depend on the sandbox at all: launching
// QEMU (~250 ms: linking, machine setup, reading the kernel), loading the
// image's device state, connecting to the agent, and the guest's first run
// through the code of a configure and an exec, which a new VMM must
// translate before it runs (~300 ms, every VMM anew). So the node keeps,
// for each warm template used lately, VMs that have done all that. A
// create of the template's warm size takes one (Take) and the node adopts
// it into the sandbox; a create that finds none starts from the image as
// before (a miss). A ready VM waits paused: no CPU, no guest pages
// written, its translations kept.
//
// VMs are kept by Kind: a template, and whether the sandbox has a network
// card; each kind only while used (a build, a warm create) within the idle
// time. The Pool decides how many of which kind to keep; its Host (the
// node) launches and ends them.
package ready

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// tick is how often the keeper checks its kinds when nothing wakes it (a
// build that just finished, an idle template).
const tick = 5 * time.Second

// retryAfter is how long the keeper leaves a kind alone after a ready VM
// of it failed to start, rather than start VMs in a loop.
const retryAfter = time.Minute

// ErrNotWarm says a kind's template is not (or no longer) warm: the pool
// keeps no VMs of it.
var ErrNotWarm = errors.New("template not warm")

// Kind is what a create asks a ready VM to be: of a template, with or
// without a network card.
type Kind struct {
	Template string // the template's key (a record's Template)
	Cardless bool   // no network card (network: {enabled: false})
}

// VM is one VM launched ahead for a kind.
type VM struct {
	Kind    Kind
	Image   string        // the image it started from (the card-less one for a card-less kind)
	Handle  *vmm.Handle   // paused
	Agent   *guest.Client // connected
	Address string        // its link's guest address on a node with networking
	Lease   *images.Lease // its image, while it maps it
}

// fits says whether v is the size a create asks for.
func (v *VM) fits(size sandbox.Size) bool {
	s := v.Handle.Spec
	return s.VCPUs == size.VCPUs && s.MemoryMiB == size.MemoryMiB && s.DiskMiB == size.DiskMiB
}

// Host launches and ends ready VMs: the node.
type Host interface {
	// Current is the image VMs of kind k start from now ("" while a
	// card-less one is not made); an error wrapping ErrNotWarm when k's
	// template is not (or no longer) warm.
	Current(ctx context.Context, k Kind) (string, error)
	// Launch starts one VM of kind k, configured and paused, building the
	// image it starts from first if it can (a card-less kind's); an error
	// wrapping ErrNotWarm when k's template is not warm.
	Launch(ctx context.Context, k Kind) (*VM, error)
	// Destroy ends a VM no sandbox adopted; withLink gives its network
	// link back too (false when a sandbox took its address).
	Destroy(v *VM, withLink bool)
	// Collect removes the images only ready VMs kept.
	Collect(ctx context.Context)
}

// Options configure a Pool.
type Options struct {
	PerKind int           // VMs kept for each kind; 0: none (the pool is off)
	Idle    time.Duration // a kind unused this long loses its VMs
	Host    Host
	Logger  *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Pool keeps ready VMs per kind.
type Pool struct {
	opts Options
	log  *slog.Logger
	kick chan struct{}

	mu      sync.Mutex
	vms     map[Kind][]*VM           // ready, by kind
	claimed map[string]*VM           // taken by a create whose boot has not adopted it yet, by sandbox
	handed  map[string]*guest.Client // agents of adopted VMs, until the sandbox's attach takes them
	used    map[Kind]time.Time       // kinds to keep VMs for, by when last used
	failed  map[Kind]time.Time       // kinds whose last VM failed to start, by when

	hits, misses atomic.Int64
}

// New makes a pool; Run keeps it.
func New(opts Options) *Pool {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Pool{opts: opts, log: opts.Logger, kick: make(chan struct{}, 1),
		vms: map[Kind][]*VM{}, claimed: map[string]*VM{}, handed: map[string]*guest.Client{},
		used: map[Kind]time.Time{}, failed: map[Kind]time.Time{}}
}

// On says whether the pool keeps VMs at all.
func (p *Pool) On() bool { return p.opts.PerKind > 0 }

// Run fills and trims the pool until ctx ends, then destroys what it
// holds. Start it after the node's recovery, so that no ready VM is
// mistaken for an orphan by the recovery's sweep.
func (p *Pool) Run(ctx context.Context) {
	if !p.On() {
		return
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.closeAll()
			return
		case <-p.kick:
		case <-t.C:
		}
		p.round(ctx)
	}
}

// Wake makes the keeper look at once.
func (p *Pool) Wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Note says kind k was used (a warm create, a build that finished, a
// card-less create of a warm template): from now on VMs are kept for it.
func (p *Pool) Note(k Kind) {
	if !p.On() || k.Template == "" {
		return
	}
	p.mu.Lock()
	p.used[k] = p.opts.Now()
	p.mu.Unlock()
}

// Retry lets the next round launch VMs of kind k at once, though its last
// launch failed less than the retry pause ago.
func (p *Pool) Retry(k Kind) {
	p.mu.Lock()
	delete(p.failed, k)
	p.mu.Unlock()
}

// Take gives sandbox id, a create of kind k and size, a ready VM if one
// waits; the sandbox's boot adopts it (Claimed).
func (p *Pool) Take(id string, k Kind, size sandbox.Size) *VM {
	if !p.On() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.vms[k]
	i := slices.IndexFunc(list, func(v *VM) bool { return v.fits(size) })
	if i < 0 {
		return nil
	}
	v := list[i]
	p.vms[k] = slices.Delete(list, i, i+1)
	p.claimed[id] = v
	return v
}

// Claimed is the ready VM sandbox id took at its create, and forgets it:
// from here on the caller owns it (adopts it, or has the host destroy it).
func (p *Pool) Claimed(id string) *VM {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.claimed[id]
	delete(p.claimed, id)
	return v
}

// Drop destroys the ready VM sandbox id took at its create, if it took
// one and nothing adopted it (the create or boot failed first); withLink
// also gives its link back, when the sandbox never took its address.
func (p *Pool) Drop(id string, withLink bool) {
	if v := p.Claimed(id); v != nil {
		p.opts.Host.Destroy(v, withLink)
	}
}

// HandOver keeps the agent connection of the VM sandbox id adopted for
// its attach (HandedOver), and counts a hit.
func (p *Pool) HandOver(id string, c *guest.Client) {
	p.mu.Lock()
	p.handed[id] = c
	p.mu.Unlock()
	p.hits.Add(1)
}

// HandedOver is the agent connection of the ready VM sandbox id adopted
// (nil: none); from then on it is the caller's.
func (p *Pool) HandedOver(id string) *guest.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.handed[id]
	delete(p.handed, id)
	return c
}

// Missed counts a create that found no ready VM for its image.
func (p *Pool) Missed() { p.misses.Add(1) }

// Count reports the ready VMs and the creates that found one or not.
func (p *Pool) Count() (ready int, hits, misses int64) {
	p.mu.Lock()
	for _, l := range p.vms {
		ready += len(l)
	}
	p.mu.Unlock()
	return ready, p.hits.Load(), p.misses.Load()
}

// VMs are the ready VMs of kind k now.
func (p *Pool) VMs(k Kind) []*VM {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.vms[k])
}

// Prune destroys the VMs of kinds whose template is no longer warm with
// the image they started from (a template deleted or rebuilt).
func (p *Pool) Prune(ctx context.Context) {
	p.mu.Lock()
	var kinds []Kind
	for k := range p.used {
		kinds = append(kinds, k)
	}
	p.mu.Unlock()
	p.trim(ctx, kinds)
}

// round trims kinds idle too long or gone, then fills the others, one VM
// at a time (a launch takes a core for a while; a create waiting for one
// should not wait for all).
func (p *Pool) round(ctx context.Context) {
	now := p.opts.Now()
	p.mu.Lock()
	var want []Kind
	for k, at := range p.used {
		if now.Sub(at) > p.opts.Idle {
			delete(p.used, k)
			continue
		}
		want = append(want, k)
	}
	p.mu.Unlock()
	if p.trim(ctx, want) > 0 {
		p.opts.Host.Collect(ctx) // their images may have waited only for them
	}
	for _, k := range want {
		for ctx.Err() == nil && p.short(k) {
			if !p.fill(ctx, k) {
				break
			}
		}
	}
}

// short says whether kind k, still used, has fewer VMs than it should and
// is not in its retry pause.
func (p *Pool) short(k Kind) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.vms[k]) < p.opts.PerKind && p.used[k] != (time.Time{}) && p.opts.Now().Sub(p.failed[k]) > retryAfter
}

// fill launches one VM of kind k and keeps it; false when none was kept.
func (p *Pool) fill(ctx context.Context, k Kind) bool {
	v, err := p.opts.Host.Launch(ctx, k)
	if errors.Is(err, ErrNotWarm) {
		return false // not (yet, or any more) warm: trim drops its VMs next round
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("ready vm", "template", k.Template, "cardless", k.Cardless, "err", err, "retry_in", retryAfter)
			p.mu.Lock()
			p.failed[k] = p.opts.Now()
			p.mu.Unlock()
		}
		return false
	}
	// Kept only if its template is still warm with that image, checked
	// under the lock trim reads the pool with: a delete in between either
	// finds it here or is seen here.
	p.mu.Lock()
	keep := p.current(ctx, k, v.Image)
	if keep {
		p.vms[k] = append(p.vms[k], v)
	}
	p.mu.Unlock()
	if !keep {
		p.opts.Host.Destroy(v, true)
		p.opts.Host.Collect(ctx)
	}
	return keep
}

// current says whether image is (still) the one VMs of kind k start from.
func (p *Pool) current(ctx context.Context, k Kind, image string) bool {
	img, err := p.opts.Host.Current(ctx, k)
	return err == nil && img == image
}

// trim destroys the ready VMs of kinds not in keep, or whose template is
// no longer warm with the same image, and says how many went; the caller
// collects the images they may have kept.
func (p *Pool) trim(ctx context.Context, keep []Kind) int {
	p.mu.Lock()
	var drop []*VM
	for k, list := range p.vms {
		if !slices.Contains(keep, k) {
			drop = append(drop, list...)
			delete(p.vms, k)
		}
	}
	p.mu.Unlock()
	for _, k := range keep {
		p.mu.Lock()
		list := p.vms[k]
		p.mu.Unlock()
		if len(list) == 0 || p.current(ctx, k, list[0].Image) {
			continue
		}
		p.mu.Lock()
		drop = append(drop, p.vms[k]...)
		delete(p.vms, k)
		delete(p.used, k)
		p.mu.Unlock()
	}
	for _, v := range drop {
		p.opts.Host.Destroy(v, true)
	}
	return len(drop)
}

// closeAll destroys every ready VM: they are no sandbox's, and a restarted
// zeishd would only sweep them.
func (p *Pool) closeAll() {
	p.mu.Lock()
	var all []*VM
	for _, l := range p.vms {
		all = append(all, l...)
	}
	p.vms = map[Kind][]*VM{}
	p.mu.Unlock()
	for _, v := range all {
		p.opts.Host.Destroy(v, true)
	}
	// Images only ready VMs kept (a template deleted while one was being
	// made, or one whose making the close cut short) go now, not at the
	// next start.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.opts.Host.Collect(ctx)
}
