package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// testNodes runs when the store keeps node membership (store.NodeStore).
func testNodes(t *testing.T, st store.Store) {
	s, ok := st.(store.NodeStore)
	if !ok {
		t.Fatalf("%T does not keep nodes (store.NodeStore)", st)
	}
	ctx := context.Background()
	if _, err := s.GetNode(ctx, "n1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	reg := func(n *store.NodeRecord) error {
		n.Region, n.URL, n.Labels, n.RegisteredAt, n.HeartbeatAt = "eu", "http://n1", map[string]string{"gpu": "no"}, now, now
		n.Capacity = store.NodeCapacity{MemoryBudgetMiB: 4096, MemoryCommittedMiB: 1024, VCPUs: 2}
		return nil
	}
	if _, err := s.UpdateNode(ctx, "n1", reg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNode(ctx, "n0", reg); err != nil {
		t.Fatal(err)
	}
	// A drain and a heartbeat: each keeps what the other wrote.
	if _, err := s.UpdateNode(ctx, "n1", func(n *store.NodeRecord) error { n.Draining = true; return nil }); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Second)
	if _, err := s.UpdateNode(ctx, "n1", func(n *store.NodeRecord) error { n.HeartbeatAt = later; return nil }); err != nil {
		t.Fatal(err)
	}
	// fn's error aborts: nothing is written, a new node is not made.
	boom := errors.New("no")
	if _, err := s.UpdateNode(ctx, "n2", func(*store.NodeRecord) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("aborted update: %v", err)
	}
	if _, err := s.GetNode(ctx, "n2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("an aborted first update made node n2: %v", err)
	}
	n, err := s.GetNode(ctx, "n1")
	if err != nil || !n.Draining || !n.HeartbeatAt.Equal(later) || n.Region != "eu" || n.Labels["gpu"] != "no" || n.Capacity.FreeMiB() != 3072 {
		t.Fatalf("n1: %+v %v", n, err)
	}
	all, err := s.ListNodes(ctx)
	if err != nil || len(all) != 2 || all[0].ID != "n0" || all[1].ID != "n1" {
		t.Fatalf("list: %+v %v", all, err)
	}
}
