package metering

import (
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func TestMeasure(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ptr := func(s int) *time.Time { x := at(s); return &x }
	// 1 vCPU-s = 10, 1 GiB-s of memory = 2, 1 GiB-s of disk = 1.
	p := Prices{VCPUSecond: 10, MemoryGiBSecond: 2, DiskGiBSecond: 1}
	rec := func(destroyed *time.Time, running ...store.Interval) *store.SandboxRecord {
		return &store.SandboxRecord{Sandbox: sandbox.Sandbox{VCPUs: 2, MemoryMiB: 512, DiskMiB: 2048, CreatedAt: t0, DestroyedAt: destroyed},
			Running: running}
	}
	cases := []struct {
		name             string
		r                *store.SandboxRecord
		from, to, now    time.Time
		running, vcpu    float64
		memory, disk     float64
		compute, storage int64
	}{
		{"never ran, stored 100 s", rec(nil), time.Time{}, time.Time{}, at(100), 0, 0, 0, 200, 0, 200},
		{"ran 10 s then stopped", rec(nil, store.Interval{Start: at(5), End: ptr(15)}), time.Time{}, time.Time{}, at(100),
			10, 20, 5, 200, 210, 200},
		{"still running", rec(nil, store.Interval{Start: at(0)}), time.Time{}, time.Time{}, at(30),
			30, 60, 15, 60, 630, 60},
		{"two runs, window cuts both", rec(nil, store.Interval{Start: at(0), End: ptr(10)}, store.Interval{Start: at(20), End: ptr(40)}),
			at(5), at(25), at(100), 10, 20, 5, 40, 210, 40},
		{"destroyed: storage ends", rec(ptr(50), store.Interval{Start: at(0), End: ptr(50)}), time.Time{}, time.Time{}, at(1000),
			50, 100, 25, 100, 1050, 100},
		{"window after delete", rec(ptr(50)), at(60), at(70), at(1000), 0, 0, 0, 0, 0, 0},
		{"to in the future is now", rec(nil, store.Interval{Start: at(0)}), time.Time{}, at(10000), at(10),
			10, 20, 5, 20, 210, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := Measure(c.r, c.from, c.to, c.now, p)
			if u.RunningSeconds != c.running || u.VCPUSeconds != c.vcpu || u.MemoryGiBSeconds != c.memory || u.DiskGiBSeconds != c.disk ||
				u.ComputeMicros != c.compute || u.StorageMicros != c.storage || u.CostMicros != c.compute+c.storage {
				t.Fatalf("got %+v", u)
			}
		})
	}
}

func TestEstimate(t *testing.T) {
	p := Prices{VCPUSecond: 10, MemoryGiBSecond: 2, DiskGiBSecond: 1}
	cases := []struct {
		n, vcpus, mem, disk int
		d                   time.Duration
		want                int64
	}{
		{1, 1, 1024, 1024, time.Second, 13},
		{3, 2, 2048, 0, time.Minute, 3 * 60 * (20 + 4)},
		{0, 4, 8192, 20480, time.Hour, 0},
	}
	for _, c := range cases {
		if got := Estimate(c.n, c.vcpus, c.mem, c.disk, c.d, p); got.CostMicros != c.want {
			t.Errorf("Estimate(%d×%d vCPU %d MiB %d MiB, %s) = %+v, want %d", c.n, c.vcpus, c.mem, c.disk, c.d, got, c.want)
		}
	}
	// The defaults are what the API documents.
	if u := Estimate(1, 1, 1024, 1024, time.Second, DefaultPrices); u.CostMicros != 19 {
		t.Errorf("1 vCPU + 1 GiB + 1 GiB disk for 1 s at the defaults = %d, want 19 (14 + 4.5 + 0.04)", u.CostMicros)
	}
}
