package qemu

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

	"github.com/zeish/zeish/vmm"
)

// sweepDriver is a driver that only keeps RAM files in shm: enough for its
// housekeeping, which starts no VM.
func sweepDriver(shm string) *Driver {
	return &Driver{shmDir: shm, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// handles is a SweepScope.Handle over a fixed set of known sandboxes.
func handles(known map[string]*vmm.Handle) func(context.Context, string) (*vmm.Handle, bool) {
	return func(_ context.Context, id string) (*vmm.Handle, bool) {
		h, ok := known[id]
		return h, ok
	}
}

// The sweep removes the RAM files a crash left: a VM's of a known sandbox
// that nothing maps. It keeps the RAM of live handles and every file of
// sandboxes it does not know (another zeishd's).
func TestSweepRemovesOrphanedRAM(t *testing.T) {
	shm := t.TempDir()
	d := sweepDriver(shm)
	ours := "sbx_aaaaaaaaaaaaaaaaaaaa"
	live := filepath.Join(shm, "zeish-"+ours+"-0001.mem")
	files := map[string]bool{ // path → kept
		live: true,
		filepath.Join(shm, "zeish-"+ours+"-0002.mem"):                 false,
		filepath.Join(shm, "zeish-sbx_bbbbbbbbbbbbbbbbbbbb-0001.mem"): true, // another zeishd's
		filepath.Join(shm, "unrelated.mem"):                           true,
	}
	for f := range files {
		if err := os.WriteFile(f, []byte("ram"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.Sweep(context.Background(), vmm.SweepScope{Root: t.TempDir(),
		Handle: handles(map[string]*vmm.Handle{ours: {Spec: vmm.Spec{ID: ours}, MemFile: live}})})
	for f, kept := range files {
		if _, err := os.Stat(f); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(f), err == nil, kept)
		}
	}
}

// An image whose capture crashed before the node recorded it is known only
// by its folder: DiscardImage finds its RAM file by that; a recorded
// image's memory and state go by the image itself.
func TestDiscardImage(t *testing.T) {
	shm := t.TempDir()
	d := sweepDriver(shm)
	dir := filepath.Join(t.TempDir(), "img_x")
	other := d.imageMemFile(filepath.Join(t.TempDir(), "img_y"))
	state := filepath.Join(t.TempDir(), "state")
	for _, f := range []string{d.imageMemFile(dir), other, state} {
		if err := os.WriteFile(f, []byte("ram"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.DiscardImage(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.imageMemFile(dir)); !os.IsNotExist(err) {
		t.Errorf("RAM of the unrecorded image survived: %v", err)
	}
	if err := d.DiscardImage(dir, &vmm.Image{MemFile: other, StateFile: state}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{other, state} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s survived: %v", f, err)
		}
	}
	if err := d.DiscardImage(dir, &vmm.Image{MemFile: other, StateFile: state}); err != nil {
		t.Errorf("discarding a discarded image: %v", err)
	}
}

// The sweep kills VMM processes of unknown sandboxes and second VMMs of a
// live one (a fork's continuation or a promotion's receiver launched ahead
// when zeishd died), never a process that only names a sandbox path, and
// leaves the live VM alone.
func TestSweepKillsSecondVMMs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sandboxes")
	id := "sbx_cccccccccccccccccccc"
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
	own := spawn(filepath.Join(root, id, "vm-1"), true)
	second := spawn(filepath.Join(root, id, "vm-2"), true)
	orphan := spawn(filepath.Join(root, "sbx_dddddddddddddddddddd", "vm-1"), true)
	user := spawn(filepath.Join(root, "sbx_dddddddddddddddddddd", "vm-1"), false) // a user's shell
	sweepDriver(t.TempDir()).Sweep(context.Background(), vmm.SweepScope{Root: root,
		Live: map[string]string{id: filepath.Join(root, id, "vm-1")}, Handle: handles(nil)})
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
// recorded leaves a file no handle names: Forget removes it, and only it.
func TestForgetRemovesUnrecordedRAM(t *testing.T) {
	shm := t.TempDir()
	id := "sbx_eeeeeeeeeeeeeeeeeeee"
	ram := filepath.Join(shm, "zeish-"+id+"-0123abcd.mem")
	other := filepath.Join(shm, "zeish-sbx_ffffffffffffffffffff-0123abcd.mem")
	for _, f := range []string{ram, other} {
		os.WriteFile(f, []byte("ram"), 0o600)
	}
	if err := sweepDriver(shm).Forget(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ram); !os.IsNotExist(err) {
		t.Errorf("the sandbox's unrecorded RAM file survived: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another sandbox's RAM file went: %v", err)
	}
}

// PlanCapture: a VM owning its RAM saves device state; one mapping an
// image's is captured live while it runs, promoted when paused or asked.
func TestPlanCapture(t *testing.T) {
	d := sweepDriver(t.TempDir())
	cases := []struct {
		shared, running, promote bool
		want                     vmm.CapturePlan
	}{
		{true, true, false, vmm.CaptureDevice},
		{true, false, true, vmm.CaptureDevice},
		{false, true, false, vmm.CaptureLive},
		{false, true, true, vmm.CapturePromote},
		{false, false, false, vmm.CapturePromote},
	}
	for _, c := range cases {
		if got := d.PlanCapture(&vmm.Handle{MemShared: c.shared}, c.running, c.promote); got != c.want {
			t.Errorf("PlanCapture(shared %v, running %v, promote %v) = %s, want %s", c.shared, c.running, c.promote, got, c.want)
		}
	}
}
