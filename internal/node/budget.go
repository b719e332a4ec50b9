package node

import (
	"context"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

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
