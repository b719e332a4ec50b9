package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// fakeDriver stands in for a VMM whose VMs are alive or not as told, and
// whose guest agents never answer.
type fakeDriver struct {
	vmm.Driver
	mu        sync.Mutex
	alive     map[string]bool
	destroyed []string
	paused    []string
	vmPaused  map[string]bool // VMs whose guest is paused (State)
	resumed   []string
}

func (f *fakeDriver) Capabilities() vmm.Capabilities { return vmm.Capabilities{Name: "fake"} }
func (f *fakeDriver) DiskFile(base string) string    { return base + ".qcow2" }
func (f *fakeDriver) DiscardImage(_ string, img *vmm.Image) error {
	if img != nil {
		os.Remove(img.MemFile)
		os.Remove(img.StateFile)
	}
	return nil
}
func (f *fakeDriver) Forget(string) error                   { return nil }
func (f *fakeDriver) Sweep(context.Context, vmm.SweepScope) {}
func (f *fakeDriver) Alive(h *vmm.Handle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alive[h.Spec.ID]
}
func (f *fakeDriver) State(_ context.Context, h *vmm.Handle) (vmm.RunState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vmPaused[h.Spec.ID] {
		return vmm.RunStatePaused, nil
	}
	return vmm.RunStateRunning, nil
}
func (f *fakeDriver) Resume(_ context.Context, h *vmm.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed = append(f.resumed, h.Spec.ID)
	return nil
}
func (f *fakeDriver) DialAgent(context.Context, *vmm.Handle) (net.Conn, error) {
	return nil, errors.New("no agent")
}
func (f *fakeDriver) Destroy(_ context.Context, h *vmm.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed = append(f.destroyed, h.Spec.ID)
	f.alive[h.Spec.ID] = false
	return nil
}
func (f *fakeDriver) Pause(_ context.Context, h *vmm.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = append(f.paused, h.Spec.ID)
	return nil
}

// Recovery never deletes user data on a timeout or a lost VM: a silent
// agent leaves the VM paused with its files, a VM gone leaves the disk, and
// a sandbox already in error keeps its folder. Each ends in error with a
// reason.
func TestRecoverKeepsUserData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	drv := &fakeDriver{alive: map[string]bool{"sbx_silent": true}}
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: drv, BootTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()

	mk := func(id string, state sandbox.State, withVM bool) string {
		disk := filepath.Join(n.sandboxDir(id), "disk-0.qcow2")
		if err := os.MkdirAll(filepath.Dir(disk), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(disk, []byte("user data"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: strings.TrimPrefix(id, "sbx_"), AccountID: "acc",
			State: state, Host: "node-1", MemoryMiB: 256, CreatedAt: time.Now()}, Disk: disk}
		if withVM {
			r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: id, Dir: filepath.Join(n.sandboxDir(id), "vm-1")}, PID: 1})
		}
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
		return disk
	}
	disks := map[string]string{
		"sbx_silent": mk("sbx_silent", sandbox.StateRunning, true),
		"sbx_gone":   mk("sbx_gone", sandbox.StateRunning, true),
		"sbx_failed": mk("sbx_failed", sandbox.StateError, false),
	}
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, _ := st.GetSandbox(ctx, "sbx_silent")
		if r.State == sandbox.StateError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("silent sandbox still %s", r.State)
		}
	}
	for id, disk := range disks {
		r, err := st.GetSandbox(ctx, id)
		if err != nil || r.State != sandbox.StateError || (id != "sbx_failed" && r.StateReason == "") {
			t.Errorf("%s: %+v %v; want error with a reason", id, r, err)
		}
		if _, err := os.Stat(disk); err != nil {
			t.Errorf("%s: recovery deleted the disk: %v", id, err)
		}
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.paused) != 1 || drv.paused[0] != "sbx_silent" || len(drv.destroyed) != 1 || drv.destroyed[0] != "sbx_gone" {
		t.Errorf("paused %v, destroyed %v; want the silent VM paused and only the gone one cleaned up", drv.paused, drv.destroyed)
	}
	if r, _ := st.GetSandbox(ctx, "sbx_silent"); r.Handle == nil {
		t.Error("the silent VM's handle was dropped: a delete could no longer stop it")
	}
}

// A DELETE that arrives while a fork captures or loads cancels it; the
// fork's failure paths (stranded, lost) must leave the sandbox deleting, so
// the delete that follows destroys it (it was overwritten, and the sandbox
// never destroyed).
func TestDeleteWinsOverAFailedFork(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: &fakeDriver{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()
	for _, fail := range []func(r *store.SandboxRecord) error{
		func(r *store.SandboxRecord) error {
			return n.stranded(ctx, r, &images.Meta{ID: "img_x", Disk: "/nonexistent"}, context.Canceled)
		},
		func(r *store.SandboxRecord) error { return n.lost(ctx, r, context.Canceled) },
	} {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: sandbox.NewName(),
			AccountID: "acc", State: sandbox.StateRunning, Host: "node-1", CreatedAt: time.Now()}}
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateSandbox(ctx, r.ID, func(r *store.SandboxRecord) error {
			r.State = sandbox.StateDeleting
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		fail(r)
		if got, _ := st.GetSandbox(ctx, r.ID); got.State != sandbox.StateDeleting {
			t.Fatalf("a fork that failed under a delete left the sandbox %s (%s), want deleting", got.State, got.StateReason)
		}
	}
}

// A VM that exits on its own (kill -9 of its QEMU) leaves its sandbox error
// with reason vm_exited and its disk; the other sandboxes are untouched.
func TestVMExitedIsNoticed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	drv := &fakeDriver{alive: map[string]bool{"sbx_alive": true}}
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: drv, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()
	for _, id := range []string{"sbx_alive", "sbx_dead"} {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: strings.TrimPrefix(id, "sbx_"), AccountID: "acc",
			State: sandbox.StateRunning, Host: "node-1", CreatedAt: time.Now()}}
		r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: id}, PID: 100})
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go n.WatchVMs(wctx, 50*time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, _ := st.GetSandbox(ctx, "sbx_dead")
		if r.State == sandbox.StateError {
			if !strings.HasPrefix(r.StateReason, ReasonVMExited) || r.Handle != nil {
				t.Fatalf("dead VM's sandbox: reason %q, handle %s", r.StateReason, r.Handle)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox of a dead VM still %s", r.State)
		}
	}
	if r, _ := st.GetSandbox(ctx, "sbx_alive"); r.State != sandbox.StateRunning {
		t.Fatalf("the other sandbox: %s %s", r.State, r.StateReason)
	}
}

// A VM caught paused inside a capture (zeishd killed during a stop, fork
// or snapshot) is resumed before recovery waits for its agent, whatever
// the sandbox's transitional state; one meant to be paused is left paused.
func TestRecoverResumesVMsCaughtPaused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	states := map[string]sandbox.State{"sbx_stopping": sandbox.StateStopping, "sbx_running": sandbox.StateRunning, "sbx_paused": sandbox.StatePaused}
	drv := &fakeDriver{alive: map[string]bool{}, vmPaused: map[string]bool{}}
	for id, state := range states {
		drv.alive[id], drv.vmPaused[id] = true, true
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: strings.TrimPrefix(id, "sbx_"), AccountID: "acc",
			State: state, Host: "node-1", CreatedAt: time.Now()}}
		r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: id}, PID: 1})
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: drv, BootTimeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	n.Close() // waits for the re-attach operations
	drv.mu.Lock()
	defer drv.mu.Unlock()
	got := strings.Join(drv.resumed, ",")
	if !strings.Contains(got, "sbx_stopping") || !strings.Contains(got, "sbx_running") || strings.Contains(got, "sbx_paused") {
		t.Fatalf("resumed %v; want the stopping and running sandboxes' VMs, not the paused one's", drv.resumed)
	}
}

// zeishd killed after a stop's capture completed but before it was
// recorded: recovery adopts the complete image the stop wrote and the
// sandbox is stopped, not error; an image older than the stop is not
// adopted.
func TestRecoverAdoptsACompletedStop(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: &fakeDriver{alive: map[string]bool{}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()
	stopBegan := time.Now().UTC()
	for _, tc := range []struct {
		id      string
		imageAt time.Time
		want    sandbox.State
	}{
		{"sbx_fresh", stopBegan.Add(time.Second), sandbox.StateStopped},
		{"sbx_stale", stopBegan.Add(-time.Hour), sandbox.StateError},
	} {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: tc.id, Name: strings.TrimPrefix(tc.id, "sbx_"), AccountID: "acc",
			State: sandbox.StateStopping, Host: "node-1", CreatedAt: time.Now(), UpdatedAt: stopBegan}}
		r.SetHandle(&vmm.Handle{Spec: vmm.Spec{ID: tc.id}, PID: 1})
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
		id, idir, lease, err := n.images.Create()
		if err != nil {
			t.Fatal(err)
		}
		m := &images.Meta{ID: id, SandboxID: tc.id, VM: &vmm.Image{Dir: idir, StateFile: filepath.Join(idir, "state")}, CreatedAt: tc.imageAt}
		os.WriteFile(m.VM.StateFile, []byte("ram and devices"), 0o600)
		if err := n.images.Write(m); err != nil {
			t.Fatal(err)
		}
		lease.Release()
	}
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]sandbox.State{"sbx_fresh": sandbox.StateStopped, "sbx_stale": sandbox.StateError} {
		r, _ := st.GetSandbox(ctx, id)
		if r.State != want || (want == sandbox.StateStopped && r.ResumeImage == "") {
			t.Errorf("%s: %s (%s), resume image %q; want %s", id, r.State, r.StateReason, r.ResumeImage, want)
		}
	}
}

// A sandbox destroyed in the records while its node was away (the control
// plane deletes a lost node's sandboxes so, cluster.Router.forget): the
// node, back, removes its VM and folder (destroyed sandboxes are not
// listed: the sweep of folders finds it).
func TestRecoverRemovesTheVMOfADestroyedSandbox(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	drv := &fakeDriver{alive: map[string]bool{"sbx_forgotten": true}}
	n := New(Options{ID: "node-1", DataDir: dir, Store: st, Driver: drv, BootTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer n.Close()
	h := &vmm.Handle{Spec: vmm.Spec{ID: "sbx_forgotten", Dir: filepath.Join(n.sandboxDir("sbx_forgotten"), "vm-1")}, PID: 1}
	if err := os.MkdirAll(h.Spec.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeHandleFile(h.Spec.Dir, h); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_forgotten", Name: "forgotten", AccountID: "acc",
		State: sandbox.StateDestroyed, Host: "node-1", MemoryMiB: 256, CreatedAt: now, DestroyedAt: &now}}
	r.SetHandle(h) // the node's own copy of the handle, as it left it
	if err := st.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := n.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	drv.mu.Lock()
	destroyed := slices.Clone(drv.destroyed)
	drv.mu.Unlock()
	if !slices.Contains(destroyed, "sbx_forgotten") {
		t.Errorf("destroyed %v; want the VM of the destroyed sandbox", destroyed)
	}
	if _, err := os.Stat(n.sandboxDir("sbx_forgotten")); !os.IsNotExist(err) {
		t.Errorf("the destroyed sandbox's folder: %v; want it removed", err)
	}
}
