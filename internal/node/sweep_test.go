package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Recovery sweeps the RAM files a crash left: a VM's of this node's
// sandbox that nothing maps, and an image's whose capture never wrote
// image.json. It keeps the RAM of live handles and every file of
// sandboxes it does not know (another zeishd's).
func TestRecoverSweepsOrphanedRAM(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	shm := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, ShmDir: shm, Driver: &fakeDriver{alive: map[string]bool{}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()

	ours := "sbx_aaaaaaaaaaaaaaaaaaaa"
	live := filepath.Join(shm, "zeish-"+ours+"-0001.mem")
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: ours, Name: "a", AccountID: "acc", State: sandbox.StateError,
		Host: "node-1", CreatedAt: time.Now()}}
	r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: ours}, MemFile: live})
	if err := st.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	imgID, _, unpin, err := n.newImageDir() // a capture that crashed before image.json
	if err != nil {
		t.Fatal(err)
	}
	unpin()
	files := map[string]bool{ // path → kept
		live: true,
		filepath.Join(shm, "zeish-"+ours+"-0002.mem"):                 false,
		filepath.Join(shm, "zeish-sbx_bbbbbbbbbbbbbbbbbbbb-0001.mem"): true, // another zeishd's
		n.imageRAMPath(imgID):                                         false,
		filepath.Join(shm, "unrelated.mem"):                           true,
	}
	for f := range files {
		if err := os.WriteFile(f, []byte("ram"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for f, kept := range files {
		if _, err := os.Stat(f); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(f), err == nil, kept)
		}
	}
}
