package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

func node(id, region string, budget, used int, mods ...func(*store.NodeRecord)) store.NodeRecord {
	n := store.NodeRecord{ID: id, Region: region, Healthy: true, HeartbeatAt: t0,
		Capacity: store.NodeCapacity{MemoryBudgetMiB: budget, MemoryCommittedMiB: used, Accel: "tcg"}}
	for _, m := range mods {
		m(&n)
	}
	return n
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPlace(t *testing.T) {
	draining := func(n *store.NodeRecord) { n.Draining = true }
	silent := func(n *store.NodeRecord) { n.HeartbeatAt = t0.Add(-time.Minute) }
	sick := func(n *store.NodeRecord) { n.Healthy = false }
	kvm := func(n *store.NodeRecord) { n.Capacity.Accel = "kvm" }
	gpu := func(n *store.NodeRecord) { n.Labels = map[string]string{"gpu": "a", "disk": "ssd"} }
	images := func(n *store.NodeRecord) { n.Capacity.ImageRAMMiB = 3000 }
	cases := []struct {
		name  string
		nodes []store.NodeRecord
		want  Want
		order []string
		err   *errdefs.Error
	}{
		{"most free memory first", []store.NodeRecord{node("a", "eu", 4096, 3000), node("b", "eu", 4096, 1000), node("c", "eu", 8192, 6000)},
			Want{MemoryMiB: 512}, []string{"b", "c", "a"}, nil},
		{"images count against free memory", []store.NodeRecord{node("a", "eu", 4096, 0, images), node("b", "eu", 4096, 2000)},
			Want{MemoryMiB: 512}, []string{"b", "a"}, nil},
		{"ties go by id", []store.NodeRecord{node("b", "eu", 4096, 0), node("a", "eu", 4096, 0)},
			Want{MemoryMiB: 512}, []string{"a", "b"}, nil},
		{"the region asked for only", []store.NodeRecord{node("a", "us", 8192, 0), node("b", "eu", 4096, 1000)},
			Want{Region: "eu", MemoryMiB: 512}, []string{"b"}, nil},
		{"no node in the region", []store.NodeRecord{node("a", "us", 8192, 0)},
			Want{Region: "eu", MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"too little room anywhere", []store.NodeRecord{node("a", "eu", 1024, 800), node("b", "eu", 1024, 900)},
			Want{MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"exactly enough fits", []store.NodeRecord{node("a", "eu", 1024, 512)},
			Want{MemoryMiB: 512}, []string{"a"}, nil},
		{"draining, silent and unhealthy nodes get nothing", []store.NodeRecord{node("a", "eu", 8192, 0, draining),
			node("b", "eu", 8192, 0, silent), node("c", "eu", 8192, 0, sick), node("d", "eu", 2048, 1024)},
			Want{MemoryMiB: 512}, []string{"d"}, nil},
		{"the accelerator asked for", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 2048, 0, kvm)},
			Want{Accel: "kvm", MemoryMiB: 512}, []string{"b"}, nil},
		{"no node with the accelerator", []store.NodeRecord{node("a", "eu", 8192, 0)},
			Want{Accel: "kvm", MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"the labels asked for", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 2048, 0, gpu)},
			Want{Labels: map[string]string{"gpu": "a"}, MemoryMiB: 512}, []string{"b"}, nil},
		{"every label, with its value", []store.NodeRecord{node("a", "eu", 8192, 0, gpu), node("b", "eu", 8192, 0)},
			Want{Labels: map[string]string{"gpu": "a", "disk": "hdd"}, MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"labels and room both", []store.NodeRecord{node("a", "eu", 1024, 900, gpu), node("b", "eu", 8192, 0)},
			Want{Labels: map[string]string{"gpu": "a"}, MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"no labels asked: any node", []store.NodeRecord{node("a", "eu", 4096, 0, gpu), node("b", "eu", 2048, 0)},
			Want{MemoryMiB: 512}, []string{"a", "b"}, nil},
		{"the node holding the template only", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 2048, 0)},
			Want{Node: "b", MemoryMiB: 512}, []string{"b"}, nil},
		{"the template's node is full", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 1024, 900)},
			Want{Node: "b", MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"the template's node is draining", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 8192, 0, draining)},
			Want{Node: "b", MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
		{"no budget is unlimited, first", []store.NodeRecord{node("a", "eu", 8192, 0), node("b", "eu", 0, 0)},
			Want{MemoryMiB: 512}, []string{"b", "a"}, nil},
		{"an empty cluster", nil, Want{MemoryMiB: 512}, nil, errdefs.ErrNodeFull},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Place(c.nodes, c.want, t0, 15*time.Second)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("got %v, want %s", err, c.err.Code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, n := range got {
				ids = append(ids, n.ID)
			}
			if len(ids) != len(c.order) {
				t.Fatalf("order %v, want %v", ids, c.order)
			}
			for i := range ids {
				if ids[i] != c.order[i] {
					t.Fatalf("order %v, want %v", ids, c.order)
				}
			}
		})
	}
}

func TestBuildOn(t *testing.T) {
	disk := func(mib int) func(*store.NodeRecord) {
		return func(n *store.NodeRecord) { n.Capacity.DiskFreeMiB = mib }
	}
	draining := func(n *store.NodeRecord) { n.Draining = true }
	silent := func(n *store.NodeRecord) { n.HeartbeatAt = t0.Add(-time.Minute) }
	cases := []struct {
		name  string
		nodes []store.NodeRecord
		want  string
		err   *errdefs.Error
	}{
		{"most free disk", []store.NodeRecord{node("a", "eu", 8192, 0, disk(100)), node("b", "eu", 1024, 0, disk(900))}, "b", nil},
		{"ties: most free memory", []store.NodeRecord{node("a", "eu", 8192, 0, disk(500)), node("b", "eu", 1024, 0, disk(500))}, "a", nil},
		{"ties: by id", []store.NodeRecord{node("b", "eu", 1024, 0, disk(500)), node("a", "eu", 1024, 0, disk(500))}, "a", nil},
		{"not a draining or silent one", []store.NodeRecord{node("a", "eu", 8192, 0, disk(900), draining),
			node("b", "eu", 8192, 0, disk(900), silent), node("c", "eu", 1024, 0, disk(10))}, "c", nil},
		{"none live", []store.NodeRecord{node("a", "eu", 8192, 0, silent)}, "", errdefs.ErrUnavailable},
		{"an empty cluster", nil, "", errdefs.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := BuildOn(c.nodes, t0, 15*time.Second)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("got %v, want %s", err, c.err.Code)
				}
				return
			}
			if err != nil || got.ID != c.want {
				t.Fatalf("built on %q (%v), want %s", got.ID, err, c.want)
			}
		})
	}
}
