package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// TestGC checks which parts of which images gc keeps, as the node's records
// refer to them (imageRefs): an image's memory and state live while a VM
// maps it, a stopped sandbox resumes from it or a snapshot holds it; its
// disk layer lives while any disk chain goes through it; what nothing
// needs goes.
func TestGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: &fakeDriver{}})
	defer n.Close()

	// mkImage makes an image with memory, state and a disk layer.
	mkImage := func(layers ...string) *images.Meta {
		id, idir, lease, err := n.images.Create()
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release()
		m := &images.Meta{ID: id, VM: &vmm.Image{Dir: idir, MemFile: filepath.Join(idir, "ram"),
			StateFile: filepath.Join(idir, "state"), MemoryMiB: 128}, Disk: n.images.LayerPath(id), Layers: layers}
		for _, f := range []string{m.VM.MemFile, m.VM.StateFile, m.Disk} {
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.images.Write(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	base := mkImage()             // a layer under everything below
	mapped := mkImage(base.ID)    // a running clone maps its memory
	resume := mkImage(base.ID)    // a stopped sandbox resumes from it
	snap := mkImage(base.ID)      // a snapshot keeps it
	layerOnly := mkImage(base.ID) // only a disk chain goes through it
	unused := mkImage()           // nothing needs it
	pinned := mkImage()           // an operation in progress holds it

	h := &vmm.Handle{Spec: vmm.Spec{ID: "sbx_a", From: mapped.VM}}
	running := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_a", Name: "a", AccountID: "acc", State: sandbox.StateRunning,
		CreatedAt: time.Now()}, Layers: []string{base.ID, mapped.ID}}
	if err := running.SetHandle(h); err != nil {
		t.Fatal(err)
	}
	stopped := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_b", Name: "b", AccountID: "acc", State: sandbox.StateStopped,
		CreatedAt: time.Now()}, Layers: []string{base.ID, layerOnly.ID}, ResumeImage: resume.ID}
	for _, r := range []*store.SandboxRecord{running, stopped} {
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateSnapshot(ctx, &store.SnapshotRecord{Snapshot: sandbox.Snapshot{ID: "snp_1", SandboxID: "sbx_a", Name: "s",
		CreatedAt: time.Now()}, Image: snap.ID}, 20); err != nil {
		t.Fatal(err)
	}
	lease := n.images.Lease(pinned.ID)
	// An image being written: a folder without image.json yet.
	_, writing, leaseWriting, err := n.images.Create()
	if err != nil {
		t.Fatal(err)
	}
	n.images.Collect(ctx)
	if _, err := os.Stat(writing); err != nil {
		t.Errorf("gc removed an image folder still being written: %v", err)
	}
	leaseWriting.Release()

	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	cases := []struct {
		name         string
		m            *images.Meta
		memory, disk bool
	}{
		{"layer under all", base, false, true},
		{"mapped by a running clone", mapped, true, true},
		{"a stopped sandbox's resume image", resume, true, true},
		{"kept by a snapshot", snap, true, true},
		{"only in a disk chain", layerOnly, false, true},
		{"needed by nothing", unused, false, false},
		{"pinned by an operation", pinned, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := exists(c.m.VM.MemFile) && exists(c.m.VM.StateFile); got != c.memory {
				t.Errorf("memory and state kept = %v, want %v", got, c.memory)
			}
			if got := exists(c.m.Disk); got != c.disk {
				t.Errorf("disk layer kept = %v, want %v", got, c.disk)
			}
		})
	}

	// Once the pin goes and the sandboxes are destroyed, everything goes.
	lease.Release()
	for _, id := range []string{"sbx_a", "sbx_b"} {
		st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
			r.State, r.Layers, r.ResumeImage, r.Handle = sandbox.StateDestroyed, nil, "", nil
			return nil
		})
	}
	st.DeleteSnapshot(ctx, "snp_1")
	n.images.Collect(ctx)
	if left, _ := os.ReadDir(n.images.Root()); len(left) != 0 {
		t.Fatalf("images left after everything was deleted: %d", len(left))
	}
}
