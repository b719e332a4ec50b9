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
	testJoinTokens(t, s)
}

// testJoinTokens: a token is stored, spent in the same transaction as the
// node's credential is set, and an aborted join changes neither.
func testJoinTokens(t *testing.T, s store.NodeStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	tok := store.JoinToken{ID: "jt_1", Hash: "h", NodeID: "n9", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateJoinToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJoinToken(ctx, tok); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("a second token of one id: %v", err)
	}
	if _, err := s.JoinNode(ctx, "jt_none", "n9", func(*store.JoinToken, *store.NodeRecord) error { return nil }); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("join with an unknown token: %v", err)
	}
	boom := errors.New("no")
	if _, err := s.JoinNode(ctx, "jt_1", "n9", func(jt *store.JoinToken, n *store.NodeRecord) error {
		jt.UsedBy, n.CredentialHash = "n9", "c"
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("aborted join: %v", err)
	}
	if _, err := s.GetNode(ctx, "n9"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("an aborted join made node n9: %v", err)
	}
	join := func(jt *store.JoinToken, n *store.NodeRecord) error {
		if jt.UsedAt != nil {
			return errors.New("spent")
		}
		if jt.Hash != "h" || jt.NodeID != "n9" || !jt.ExpiresAt.Equal(now.Add(time.Hour)) || n.ID != "n9" {
			return errors.New("read back wrong")
		}
		jt.UsedAt, jt.UsedBy = &now, n.ID
		n.CredentialHash, n.JoinedAt = "c", &now
		return nil
	}
	if n, err := s.JoinNode(ctx, "jt_1", "n9", join); err != nil || n.CredentialHash != "c" {
		t.Fatalf("join: %+v %v", n, err)
	}
	if n, err := s.GetNode(ctx, "n9"); err != nil || n.CredentialHash != "c" || n.JoinedAt == nil || !n.JoinedAt.Equal(now) {
		t.Fatalf("joined node: %+v %v", n, err)
	}
	if _, err := s.JoinNode(ctx, "jt_1", "n9", join); err == nil || err.Error() != "spent" {
		t.Fatalf("a spent token joined again: %v", err)
	}
}
