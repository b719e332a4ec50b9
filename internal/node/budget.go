package node

import (
	"context"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// reserve checks the host has memory for count more sandboxes like r and
// holds it for them until release, which the caller calls once their
// records count (or the operation failed). Check and hold are one step
// under budgetMu, so concurrent creates and forks cannot both take the last
// of the budget. Memory is what may run plus the RAM that images
// (snapshots, stopped forks' parents) keep in tmpfs.
func (n *Node) reserve(r *store.SandboxRecord, count int) (release func(), err error) {
	need := count * r.MemoryMiB
	n.budgetMu.Lock()
	defer n.budgetMu.Unlock()
	if free, ok := datadir.FreeMiB(n.opts.ShmDir); ok && free-n.reservedMiB < need+images.ShmHeadroomMiB {
		return nil, fmt.Errorf("host %s has %d MiB left in %s; %d sandbox(es) of %d MiB need %d: %w",
			n.opts.ID, max(0, free-n.reservedMiB), n.opts.ShmDir, count, r.MemoryMiB, need, errdefs.ErrStorageFull)
	}
	if n.opts.MemoryBudgetMiB > 0 {
		used, err := n.committedMiB()
		if err != nil {
			return nil, err
		}
		used += n.images.RAMMiB(nil) + n.reservedMiB
		if used+need > n.opts.MemoryBudgetMiB {
			return nil, fmt.Errorf("host %s has %d MiB of its %d MiB budget free (saved images included); %d sandbox(es) of %d MiB need %d: %w",
				n.opts.ID, max(0, n.opts.MemoryBudgetMiB-used), n.opts.MemoryBudgetMiB, count, r.MemoryMiB, need, errdefs.ErrNodeFull)
		}
	}
	n.reservedMiB += need
	released := false
	return func() {
		n.budgetMu.Lock()
		defer n.budgetMu.Unlock()
		if !released {
			released = true
			n.reservedMiB -= need
		}
	}, nil
}

// Capacity is the node's memory as it promises it, for metrics.
func (n *Node) Capacity() (metrics.Capacity, error) {
	used, err := n.committedMiB()
	if err != nil {
		return metrics.Capacity{}, err
	}
	ready, hits, misses := n.ready.Count()
	return metrics.Capacity{BudgetMiB: n.opts.MemoryBudgetMiB, CommittedMiB: used, ImageRAMMiB: n.images.RAMMiB(nil), ImageDiskMiB: n.images.ColdMiB(),
		ReadyVMs: ready, ReadyHits: hits, ReadyMisses: misses}, nil
}

// committedMiB is the guest memory promised to the sandboxes that may run.
func (n *Node) committedMiB() (int, error) {
	rows, err := n.opts.Store.ListSandboxes(context.Background(), store.SandboxFilter{
		States: sandbox.MemoryStates,
	})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, r := range rows {
		if r.Host == n.opts.ID {
			total += r.MemoryMiB
		}
	}
	return total, nil
}

// checkAccountImageRAM refuses a capture of r (a snapshot or a fork, which
// keep r's RAM in an image) when r's account already keeps its cap of image
// RAM in tmpfs: one tenant must not fill the tmpfs every guest's RAM lives in.
func (n *Node) checkAccountImageRAM(ctx context.Context, r *store.SandboxRecord) error {
	if n.opts.AccountImageRAMMiB <= 0 {
		return nil
	}
	rows, err := n.opts.Store.ListSandboxes(ctx, store.SandboxFilter{AccountID: r.AccountID, IncludeDestroyed: true})
	if err != nil {
		return err
	}
	own := map[string]bool{}
	for _, s := range rows {
		own[s.ID] = true
	}
	used := n.images.RAMMiB(func(m *images.Meta) bool { return own[m.SandboxID] })
	if used+r.MemoryMiB > n.opts.AccountImageRAMMiB {
		return fmt.Errorf("account %s keeps %d MiB of memory in snapshots and fork images, its cap is %d MiB and this capture of %s needs up to %d more; delete snapshots or sandboxes: %w",
			r.AccountID, used, n.opts.AccountImageRAMMiB, r.ID, r.MemoryMiB, errdefs.ErrLimitReached)
	}
	return nil
}
