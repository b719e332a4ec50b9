package node

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

func budgetNode(t *testing.T, budgetMiB int) *Node {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, dir)
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, MemoryBudgetMiB: budgetMiB, ShmDir: dir, Driver: &fakeDriver{}})
	t.Cleanup(n.Close)
	return n
}

// Concurrent creates and forks cannot both take the last of the budget: a
// check and its reservation are one step.
func TestReserveIsAtomic(t *testing.T) {
	n := budgetNode(t, 16)
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{MemoryMiB: 10}}
	var mu sync.Mutex
	var granted int
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.budget.Reserve(r.MemoryMiB, 1); err == nil {
				mu.Lock()
				granted++
				mu.Unlock()
			} else if !errors.Is(err, errdefs.ErrNodeFull) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if granted != 1 {
		t.Fatalf("%d reservations of 10 MiB granted within a 16 MiB budget, want 1", granted)
	}
}

// RAM that images keep in tmpfs counts against the budget; a start of a
// stopped sandbox is checked too; tmpfs without room is storage_full.
func TestReserveCountsImageRAM(t *testing.T) {
	ctx := context.Background()
	n := budgetNode(t, 16)
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_a", Name: "a", AccountID: "acc", MemoryMiB: 10,
		State: sandbox.StateStopped, Host: "node-1", CreatedAt: time.Now()}}
	release, err := n.budget.Reserve(r.MemoryMiB, 1)
	if err != nil {
		t.Fatalf("empty node: %v", err)
	}
	release()
	release() // twice is once

	id, dir, lease, err := n.images.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	ram := make([]byte, 8<<20)
	rand.Read(ram)
	m := &images.Meta{ID: id, VM: &vmm.Image{Dir: dir, MemFile: filepath.Join(dir, "ram"), StateFile: filepath.Join(dir, "state"), MemoryMiB: 8}}
	if err := os.WriteFile(m.VM.MemFile, ram, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.images.Write(m); err != nil {
		t.Fatal(err)
	}
	if _, err := n.budget.Reserve(r.MemoryMiB, 1); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("10 MiB with 8 MiB of image RAM in a 16 MiB budget: %v, want node_full", err)
	}
	if err := n.opts.Store.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Start(ctx, r.ID); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("start beyond the budget: %v, want node_full", err)
	}
	if got, _ := n.opts.Store.GetSandbox(ctx, r.ID); got.State != sandbox.StateStopped {
		t.Fatalf("a refused start changed the sandbox: %s", got.State)
	}
	os.Remove(m.VM.MemFile)
	if _, err := n.budget.Reserve(r.MemoryMiB, 1); err != nil {
		t.Fatalf("after the image RAM went: %v", err)
	}

	huge := &store.SandboxRecord{Sandbox: sandbox.Sandbox{MemoryMiB: 1 << 30}}
	n.opts.MemoryBudgetMiB = 0
	if _, err := n.budget.Reserve(huge.MemoryMiB, 1); !errors.Is(err, errdefs.ErrStorageFull) {
		t.Fatalf("more RAM than the tmpfs holds: %v, want storage_full", err)
	}
}

// A stop that cannot fit the guest's memory in the data dir is refused up
// front with storage_full, and the sandbox is left as it was.
func TestStopRefusedWithoutRoom(t *testing.T) {
	ctx := context.Background()
	n := budgetNode(t, 0)
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_a", Name: "a", AccountID: "acc", MemoryMiB: 1 << 30,
		State: sandbox.StateRunning, Host: "node-1", CreatedAt: time.Now()}}
	if err := n.opts.Store.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Stop(ctx, r.ID); !errors.Is(err, errdefs.ErrStorageFull) {
		t.Fatalf("stop of 1 PiB of memory: %v, want storage_full", err)
	}
	if got, _ := n.opts.Store.GetSandbox(ctx, r.ID); got.State != sandbox.StateRunning {
		t.Fatalf("a refused stop changed the sandbox: %s", got.State)
	}
}

// One account's images may keep at most its cap of RAM in tmpfs: a
// snapshot past it is limit_reached before anything is paused; another
// account is not affected.
func TestAccountImageRAMCap(t *testing.T) {
	ctx := context.Background()
	n := budgetNode(t, 0)
	n.opts.AccountImageRAMMiB = 16
	mk := func(id, acct string) *store.SandboxRecord {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id[4:9], AccountID: acct, MemoryMiB: 10,
			State: sandbox.StateRunning, Host: "node-1", CreatedAt: time.Now()}}
		if err := n.opts.Store.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := mk("sbx_aaaaaaaaaaaaaaaaaaaa", "acc_a")
	b := mk("sbx_bbbbbbbbbbbbbbbbbbbb", "acc_b")
	id, dir, lease, err := n.images.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	ram := make([]byte, 8<<20)
	rand.Read(ram)
	m := &images.Meta{ID: id, SandboxID: a.ID, VM: &vmm.Image{Dir: dir, MemFile: filepath.Join(dir, "ram"), MemoryMiB: 10}}
	os.WriteFile(m.VM.MemFile, ram, 0o600)
	if err := n.images.Write(m); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateSnapshot(ctx, a.ID, "one-more"); !errors.Is(err, errdefs.ErrLimitReached) {
		t.Fatalf("snapshot past the account's image RAM cap: %v, want limit_reached", err)
	}
	if err := n.checkAccountImageRAM(ctx, b); err != nil {
		t.Fatalf("another account: %v", err)
	}
}
