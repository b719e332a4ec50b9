package control

import (
	"context"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Usage and cost (docs/quotas.md: billing): compute while a sandbox runs,
// storage on its full disk size from create until delete.

// Usage reports the caller's usage in [from, to): by default (zero times)
// since its first sandbox, until now.
func (c *Control) Usage(ctx context.Context, who Caller, from, to time.Time) (api.UsageReport, error) {
	now := time.Now().UTC()
	if to.IsZero() || to.After(now) {
		to = now
	}
	if from.After(to) {
		return api.UsageReport{}, invalid("from must not be after to")
	}
	rows, err := c.store.ListSandboxes(ctx, store.SandboxFilter{AccountID: who.Account.ID, IncludeDestroyed: true})
	if err != nil {
		return api.UsageReport{}, err
	}
	out := api.UsageReport{From: from, To: to, Prices: api.Prices(c.prices), Sandboxes: []api.SandboxUsage{}}
	var total metering.Usage
	if from.IsZero() {
		// Since the account's first sandbox.
		out.From = to
		for _, row := range rows {
			if row.CreatedAt.Before(out.From) {
				out.From = row.CreatedAt
			}
		}
	}
	for _, row := range rows {
		// Only sandboxes that existed in the window.
		if !row.CreatedAt.Before(to) || (row.DestroyedAt != nil && row.DestroyedAt.Before(from)) {
			continue
		}
		u := metering.Measure(row, from, to, now, c.prices)
		u.NetInBytes, u.NetOutBytes = c.node.NetBytes(row)
		total = total.Add(u)
		out.Sandboxes = append(out.Sandboxes, api.SandboxUsage{SandboxID: row.ID, Name: row.Name, State: row.State, Usage: api.Usage(u)})
	}
	out.Total = api.Usage(total)
	return out, nil
}

// EstimateRequest is what the pricing calculator is asked; a nil field
// takes its default.
type EstimateRequest struct {
	Sandboxes, Minutes        *int // default 1 sandbox, 60 minutes
	VCPUs, MemoryMiB, DiskMiB *int // default the size's
	Size                      string
}

// Estimate prices req at the price table.
func (c *Control) Estimate(req EstimateRequest) (api.PriceEstimate, error) {
	value := func(name string, v *int, def, lo, hi int) (int, error) {
		if v == nil {
			return def, nil
		}
		if *v < lo || *v > hi {
			return 0, invalid("%s=%d: want a whole number within %d..%d", name, *v, lo, hi)
		}
		return *v, nil
	}
	n, err := value("sandboxes", req.Sandboxes, 1, 1, 10000)
	if err != nil {
		return api.PriceEstimate{}, err
	}
	minutes, err := value("minutes", req.Minutes, 60, 1, 60*24*366)
	if err != nil {
		return api.PriceEstimate{}, err
	}
	var vcpus, mem, disk int
	for _, p := range []struct {
		name string
		v    *int
		dst  *int
	}{{"vcpus", req.VCPUs, &vcpus}, {"memory_mib", req.MemoryMiB, &mem}, {"disk_mib", req.DiskMiB, &disk}} {
		if *p.dst, err = value(p.name, p.v, 0, 1, 1<<30); err != nil {
			return api.PriceEstimate{}, err
		}
	}
	size, err := sandbox.ResolveSize(req.Size, vcpus, mem, disk)
	if err != nil {
		return api.PriceEstimate{}, err
	}
	u := metering.Estimate(n, size.VCPUs, size.MemoryMiB, size.DiskMiB, time.Duration(minutes)*time.Minute, c.prices)
	return api.PriceEstimate{Sandboxes: n, VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB,
		Minutes: minutes, Prices: api.Prices(c.prices), Usage: api.Usage(u)}, nil
}
