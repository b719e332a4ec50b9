// Package metering turns a sandbox's recorded running intervals and lifetime
// into usage and cost: compute (vCPU-seconds and GiB-seconds of memory) while
// it runs, storage (GiB-seconds of its full disk size) from create until
// delete. Prices are micro-dollars (1e-6 USD) per unit-second.
package metering

import (
	"math"
	"time"

	"github.com/zeish/zeish/internal/store"
)

// Prices is the price table, in micro-dollars per unit-second.
type Prices struct {
	VCPUSecond      float64 `json:"vcpu_second_micros"`
	MemoryGiBSecond float64 `json:"memory_gib_second_micros"`
	DiskGiBSecond   float64 `json:"disk_gib_second_micros"`
}

// DefaultPrices: $0.000014 per vCPU-second, $0.0000045 per GiB-second of
// memory, $0.00000004 per GiB-second of disk (about $0.10 per GiB-month).
var DefaultPrices = Prices{VCPUSecond: 14, MemoryGiBSecond: 4.5, DiskGiBSecond: 0.04}

// Usage is what a sandbox (or several, summed) used in a window.
type Usage struct {
	RunningSeconds   float64 `json:"running_seconds"`
	VCPUSeconds      float64 `json:"vcpu_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	DiskGiBSeconds   float64 `json:"disk_gib_seconds"`
	ComputeMicros    int64   `json:"compute_micros"`
	StorageMicros    int64   `json:"storage_micros"`
	CostMicros       int64   `json:"cost_micros"`
	// NetInBytes and NetOutBytes are what the sandbox's network card
	// received and sent over its whole life (not only the window: links
	// count totals), unpriced.
	NetInBytes  uint64 `json:"net_in_bytes"`
	NetOutBytes uint64 `json:"net_out_bytes"`
}

// Add sums u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		RunningSeconds:   u.RunningSeconds + v.RunningSeconds,
		VCPUSeconds:      u.VCPUSeconds + v.VCPUSeconds,
		MemoryGiBSeconds: u.MemoryGiBSeconds + v.MemoryGiBSeconds,
		DiskGiBSeconds:   u.DiskGiBSeconds + v.DiskGiBSeconds,
		ComputeMicros:    u.ComputeMicros + v.ComputeMicros,
		StorageMicros:    u.StorageMicros + v.StorageMicros,
		CostMicros:       u.CostMicros + v.CostMicros,
		NetInBytes:       u.NetInBytes + v.NetInBytes,
		NetOutBytes:      u.NetOutBytes + v.NetOutBytes,
	}
}

// overlap is how many seconds [a, b) and [from, to) share.
func overlap(a, b, from, to time.Time) float64 {
	if a.Before(from) {
		a = from
	}
	if b.After(to) {
		b = to
	}
	if !b.After(a) {
		return 0
	}
	return b.Sub(a).Seconds()
}

// Measure is r's usage within [from, to); intervals still open end at now.
// A zero from means since the beginning, a zero to means now.
func Measure(r *store.SandboxRecord, from, to, now time.Time, p Prices) Usage {
	if to.IsZero() || to.After(now) {
		to = now
	}
	var running float64
	for _, iv := range r.Running {
		end := now
		if iv.End != nil {
			end = *iv.End
		}
		running += overlap(iv.Start, end, from, to)
	}
	alive := now
	if r.DestroyedAt != nil {
		alive = *r.DestroyedAt
	}
	stored := overlap(r.CreatedAt, alive, from, to)
	return price(running, stored, r.VCPUs, r.MemoryMiB, r.DiskMiB, p)
}

func price(running, stored float64, vcpus, memoryMiB, diskMiB int, p Prices) Usage {
	u := Usage{
		RunningSeconds:   running,
		VCPUSeconds:      running * float64(vcpus),
		MemoryGiBSeconds: running * float64(memoryMiB) / 1024,
		DiskGiBSeconds:   stored * float64(diskMiB) / 1024,
	}
	compute := u.VCPUSeconds*p.VCPUSecond + u.MemoryGiBSeconds*p.MemoryGiBSecond
	storage := u.DiskGiBSeconds * p.DiskGiBSecond
	u.ComputeMicros = int64(math.Round(compute))
	u.StorageMicros = int64(math.Round(storage))
	u.CostMicros = int64(math.Round(compute + storage))
	return u
}

// Estimate is the cost of n sandboxes of one size running for d.
func Estimate(n, vcpus, memoryMiB, diskMiB int, d time.Duration, p Prices) Usage {
	secs := d.Seconds() * float64(n)
	return price(secs, secs, vcpus, memoryMiB, diskMiB, p)
}
