// Package node runs sandboxes on one host: it boots them through a vmm.Driver,
// moves them through their states (persisting every step, so nothing is lost
// across a zeishd restart), forks, snapshots and restores them, and finds its
// VMs again after a restart. Each operation is a named step list with
// rollback (internal/rollback), one at a time per sandbox.
//
// Its other jobs are packages of their own, each behind a small interface
// the node implements where they need it: images (metadata, leases, gc, the
// cold tier), ready (the ready-VM pool), merge (bounded disk chains), budget
// (guest memory reservations), sandboxnet (the sandboxes' network links) and
// agents (guest-agent connections).
package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/node/agents"
	"github.com/zeish/zeish/internal/node/budget"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/node/merge"
	"github.com/zeish/zeish/internal/node/ready"
	"github.com/zeish/zeish/internal/node/sandboxnet"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Log attribute keys.
const (
	logSandbox = "sandbox"
	logNode    = "node"
)

// Templates resolves a template name to bootable artifacts, building the
// built-in one on first use.
type Templates interface {
	Get(ctx context.Context, name string) (sandbox.Template, error)
}

// Options configure a Node.
type Options struct {
	ID          string // node id, shown as a sandbox's host
	Region      string
	DataDir     string // sandboxes live in <DataDir>/sandboxes/<id>
	Store       store.Store
	Driver      vmm.Driver
	Templates   Templates
	Logger      *slog.Logger
	BootTimeout time.Duration // guest boot to agent answer; default 3 minutes (TCG on a busy host is slow)
	// Names picks the name of a sandbox created or forked without one;
	// default sandbox.NewName (tests make it clash).
	Names func() string
	// MemoryBudgetMiB is the guest memory the host may promise to sandboxes
	// that run; a create or fork beyond it gets node_full. 0: no limit.
	MemoryBudgetMiB int
	// ShmDir is the tmpfs that holds guest RAM files (default /dev/shm): a
	// start, create or fork is refused with storage_full unless it has room
	// for the new RAM.
	ShmDir string
	// StoppedPromotion captures a sandbox whose RAM is an image's the old
	// way: promoted into a VM owning its RAM with the guest stopped for the
	// copy (a pause that grows with RAM), then captured. For comparison in
	// bench; by default such sandboxes are captured live.
	StoppedPromotion bool
	// Network gives sandboxes routed links with egress policy (internal/node/sandboxnet);
	// nil: the node runs without networking.
	Network *network.Manager
	// AccountImageRAMMiB caps the RAM one account's images (snapshots, fork
	// bases) may keep in ShmDir; a snapshot or fork past it gets
	// limit_reached. 0: no cap.
	AccountImageRAMMiB int
	// ColdAfter moves an image's RAM (a snapshot's, a fork base's, a warm
	// template's) from ShmDir to the data dir's disk once nothing has
	// mapped or used it for this long; a VM starting from it copies it
	// back (internal/node/images: cold.go). 0: images stay in ShmDir.
	ColdAfter time.Duration
	// Desktop is the screen of sandboxes with desktop: true (zero:
	// desktop's defaults, 1280x800x24 on :0).
	Desktop desktop.Config
	// ReadyVMs is how many VMs the node keeps launched and loaded, paused,
	// for each warm template used lately, so that a create takes one
	// instead of starting a VMM (internal/node/ready). 0: none.
	ReadyVMs int
	// DiskLayers is how many frozen layers a running sandbox's disk may
	// stand on before the node merges them into one (internal/node/merge). 0: never.
	DiskLayers int
	// ReadyWarmup are the execs a ready VM tries until one runs (default
	// DefaultReadyWarmup).
	ReadyWarmup [][]string
	// ImageStore is the image store the cluster's nodes share
	// (ZEISH_IMAGE_STORE; internal/node/images: remote.go): complete images
	// are uploaded to it in the background, and sandboxes, snapshots and
	// fork children whose images another node made start here from it.
	// nil: images stay on this host.
	ImageStore *images.Remote
	// TemplateCacheMiB bounds the disk the templates fetched from the
	// image store take in the data dir (templatecache.go); the least
	// recently used no sandbox here stands on go first. 0: no bound.
	TemplateCacheMiB int
}

// Node runs the sandboxes of one host.
type Node struct {
	opts  Options
	log   *slog.Logger
	watch *watcher

	// life is the node's lifetime: background operations run under it, never
	// under a request's context.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu  sync.Mutex
	ops map[string]*op // the operation in progress per sandbox

	// The node's jobs besides the lifecycle, each a package of its own.
	agents   *agents.Conns     // live guest-agent connections
	images   *images.Store     // images: metadata, leases, gc, tiers
	budget   *budget.Budget    // guest memory promised
	links    *sandboxnet.Links // the sandboxes' network links
	ready    *ready.Pool       // VMs launched ahead from warm templates
	merger   *merge.Merger     // bounded disk chains
	cardless cardlessBuilds    // warm images whose card-less build failed
}

// op is one background operation on a sandbox; only one runs at a time.
type op struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New makes a node; call Recover before serving.
func New(opts Options) *Node {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 3 * time.Minute
	}
	if opts.Names == nil {
		opts.Names = sandbox.NewName
	}
	if opts.Region == "" {
		opts.Region = "local"
	}
	if opts.ShmDir == "" {
		opts.ShmDir = "/dev/shm"
	}
	opts.Driver = guardDriver(opts.Driver)
	life, stop := context.WithCancel(context.Background())
	n := &Node{
		opts:  opts,
		log:   opts.Logger.With(logNode, opts.ID),
		watch: newWatcher(),
		life:  life,
		stop:  stop,
		ops:   map[string]*op{},
	}
	n.images = images.New(images.Options{Dir: filepath.Join(opts.DataDir, "images"), Driver: opts.Driver,
		Referrers: imageRefs{n}, Host: opts.ID, ColdAfter: opts.ColdAfter, Remote: opts.ImageStore, Templates: imageTemplates{n},
		Logger: n.log})
	n.agents = agents.New(opts.Driver, opts.BootTimeout)
	n.links = sandboxnet.New(opts.Network, n.log)
	n.budget = budget.New(budget.Options{Host: opts.ID, ShmDir: opts.ShmDir, LimitMiB: opts.MemoryBudgetMiB,
		Committed: n.committedMiB, ImageRAM: func() int { return n.images.RAMMiB(nil) }})
	n.ready = newReadyPool(n)
	n.merger = merge.New(merge.Options{MaxLayers: opts.DiskLayers, Images: n.images, Driver: opts.Driver,
		Sandboxes: mergeSandboxes{n}, Logger: n.log})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.merger.Run(life)
	}()
	return n
}

// Capabilities reports what the node's driver can do.
func (n *Node) Capabilities() vmm.Capabilities { return n.opts.Driver.Capabilities() }

// Region is the node's region label.
func (n *Node) Region() string { return n.opts.Region }

// Close cancels operations in progress, waits for them and drops agent
// connections. Running VMs keep running: a restarted zeishd finds them again.
func (n *Node) Close() {
	n.stop()
	n.wg.Wait()
	n.agents.CloseAll()
	if n.images.HasRemote() {
		// Other nodes' deletes free images here too (remote.go): one last
		// collection, as the periodic one would.
		n.images.Collect(context.Background())
	}
}

func (n *Node) sandboxDir(id string) string {
	return filepath.Join(n.opts.DataDir, "sandboxes", id)
}

// diskPath is the writable overlay of generation gen of sandbox id.
func (n *Node) diskPath(id string, gen int) string {
	return filepath.Join(n.sandboxDir(id), n.opts.Driver.DiskFile(fmt.Sprintf("disk-%d", gen)))
}

// run starts fn as the sandbox's background operation. It waits for any
// earlier operation on the same sandbox to end first.
func (n *Node) run(id string, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(n.life)
	o := &op{cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	prev := n.ops[id]
	n.ops[id] = o
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer cancel()
		defer close(o.done)
		if prev != nil {
			<-prev.done
		}
		fn(ctx)
		n.mu.Lock()
		if n.ops[id] == o {
			delete(n.ops, id)
		}
		n.mu.Unlock()
	}()
}

// cancelOp cancels the operation in progress on id, if any.
func (n *Node) cancelOp(id string) {
	n.mu.Lock()
	o := n.ops[id]
	n.mu.Unlock()
	if o != nil {
		o.cancel()
	}
}

// transition persists the state op leads to (sandbox.Next) if the
// lifecycle allows op in the sandbox's current state, and wakes the
// sandbox's waiters. A background operation that lost a race (a boot
// finishing after a delete began) is refused here instead of clobbering the
// newer state.
func (n *Node) transition(ctx context.Context, id string, op sandbox.Op, reason string, edit func(*store.SandboxRecord)) (*store.SandboxRecord, error) {
	var st sandbox.State
	r, err := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), id, func(r *store.SandboxRecord) error {
		var err error
		if st, err = sandbox.NextFor(id, r.State, op); err != nil {
			return err
		}
		r.State = st
		r.StateReason = cleanReason(reason)
		r.UpdatedAt = time.Now().UTC()
		if st != sandbox.StateError {
			r.ErrorCode, r.ErrorMessage = "", ""
		}
		if edit != nil {
			edit(r)
		}
		return nil
	})
	if err != nil {
		n.log.Info("state change skipped", logSandbox, id, "op", op, "err", err)
		return nil, err
	}
	n.log.Info("state", logSandbox, id, "state", st, "reason", reason)
	n.watch.notify(id)
	return r, nil
}

// fail records op, an outcome that leads to state error, with a stable
// code (sandbox.Err…) and a message, which may hold guest text and is
// cleaned first; reason is the short state_reason.
func (n *Node) fail(ctx context.Context, id string, op sandbox.Op, code, reason, message string, edit func(*store.SandboxRecord)) {
	message = sandbox.CleanMessage(message)
	n.transition(ctx, id, op, sandbox.CleanMessage(reason), func(r *store.SandboxRecord) {
		r.ErrorCode, r.ErrorMessage = code, message
		if edit != nil {
			edit(r)
		}
	})
}

func removeDir(dir string) func(context.Context) error {
	return func(context.Context) error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		return nil
	}
}
