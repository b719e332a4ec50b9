// Package budget keeps a node's promises of guest memory: a create, fork
// or start reserves the memory of its sandboxes before any VM starts, and
// is refused (node_full, storage_full) when the host cannot keep the
// promise. A reservation is held until the sandboxes' records count the
// memory themselves (or the operation failed).
package budget

import (
	"fmt"
	"sync"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
)

// ShmHeadroomMiB is tmpfs space a new RAM file must leave free: tmpfs full
// means SIGBUS in every guest whose RAM lives there.
const ShmHeadroomMiB = 256

// Options configure a Budget.
type Options struct {
	Host   string // the node's id, in errors
	ShmDir string // the tmpfs guest RAM lives in
	// LimitMiB is the guest memory the host may promise; 0: no limit (the
	// tmpfs's room is still checked).
	LimitMiB int
	// Committed is the memory promised to sandboxes whose records count
	// it (those that may run).
	Committed func() (int, error)
	// ImageRAM is the RAM images keep in ShmDir.
	ImageRAM func() int
}

// Budget holds reservations of guest memory.
type Budget struct {
	opts Options
	// mu makes a check and its reservation one step, so concurrent creates
	// and forks cannot both take the last of the budget.
	mu       sync.Mutex
	reserved int // MiB checked and promised to sandboxes whose records do not count yet
}

// New makes a budget.
func New(opts Options) *Budget { return &Budget{opts: opts} }

// Reserve checks the host has memory for count more sandboxes of memMiB
// each and holds it for them until release (which may be called more than
// once). Memory is what may run plus the RAM that images (snapshots,
// stopped forks' parents) keep in tmpfs.
func (b *Budget) Reserve(memMiB, count int) (release func(), err error) {
	need := count * memMiB
	b.mu.Lock()
	defer b.mu.Unlock()
	if free, ok := datadir.FreeMiB(b.opts.ShmDir); ok && free-b.reserved < need+ShmHeadroomMiB {
		return nil, fmt.Errorf("host %s has %d MiB left in %s; %d sandbox(es) of %d MiB need %d: %w",
			b.opts.Host, max(0, free-b.reserved), b.opts.ShmDir, count, memMiB, need, errdefs.ErrStorageFull)
	}
	if b.opts.LimitMiB > 0 {
		used, err := b.opts.Committed()
		if err != nil {
			return nil, err
		}
		used += b.opts.ImageRAM() + b.reserved
		if used+need > b.opts.LimitMiB {
			return nil, fmt.Errorf("host %s has %d MiB of its %d MiB budget free (saved images included); %d sandbox(es) of %d MiB need %d: %w",
				b.opts.Host, max(0, b.opts.LimitMiB-used), b.opts.LimitMiB, count, memMiB, need, errdefs.ErrNodeFull)
		}
	}
	b.reserved += need
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.reserved -= need
			b.mu.Unlock()
		})
	}, nil
}
