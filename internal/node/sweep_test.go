package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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

// Recovery kills VMM processes of unknown sandboxes and second VMMs of a
// live one, never a process that only names a sandbox path, (a fork's continuation or a promotion's receiver launched
// ahead when zeishd died), and leaves the live VM alone.
func TestRecoverKillsSecondVMMs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := "sbx_cccccccccccccccccccc"
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, ShmDir: t.TempDir(), BootTimeout: time.Second,
		Driver: &fakeDriver{alive: map[string]bool{id: true}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: "c", AccountID: "acc", State: sandbox.StatePaused,
		Host: "node-1", CreatedAt: time.Now()}}
	r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: id, Dir: filepath.Join(n.sandboxDir(id), "vm-1")}, PID: 1})
	if err := st.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Stand-ins for VMMs: their command lines name a VM folder.
	spawn := func(vmDir string, vmm bool) *exec.Cmd {
		args := []string{"-c", "sleep 300", filepath.Join(vmDir, "qemu.pid")}
		if vmm {
			args = append(args, "-name", "zeish-"+filepath.Base(filepath.Dir(vmDir)))
		}
		cmd := exec.Command("sh", args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	own := spawn(filepath.Join(n.sandboxDir(id), "vm-1"), true)
	second := spawn(filepath.Join(n.sandboxDir(id), "vm-2"), true)
	orphan := spawn(filepath.Join(n.sandboxDir("sbx_dddddddddddddddddddd"), "vm-1"), true)
	user := spawn(filepath.Join(n.sandboxDir("sbx_dddddddddddddddddddd"), "vm-1"), false) // a user's shell
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*exec.Cmd{"second": second, "orphan": orphan} {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("the %s VMM was not killed", name)
		}
	}
	if err := own.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the live VMM was killed: %v", err)
	}
	if err := user.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a user's process naming a sandbox path was killed: %v", err)
	}
}

// A create killed after its VM made a RAM file but before the handle was
// recorded leaves a file no handle names: deleting the sandbox removes it.
func TestDeleteRemovesUnrecordedRAM(t *testing.T) {
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
	id := "sbx_eeeeeeeeeeeeeeeeeeee"
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: "e", AccountID: "acc", State: sandbox.StateError,
		StateReason: "zeishd stopped before the VM started", Host: "node-1", CreatedAt: time.Now()}}
	if err := st.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	ram := filepath.Join(shm, "zeish-"+id+"-0123abcd.mem")
	other := filepath.Join(shm, "zeish-sbx_ffffffffffffffffffff-0123abcd.mem")
	for _, f := range []string{ram, other} {
		os.WriteFile(f, []byte("ram"), 0o600)
	}
	if _, err := n.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if _, err := os.Stat(ram); !os.IsNotExist(err) {
		t.Errorf("the sandbox's unrecorded RAM file survived its delete: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another sandbox's RAM file went: %v", err)
	}
}
