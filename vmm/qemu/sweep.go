package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// RAM files in shmDir are named zeish-<sandbox id>-<hex>.mem (a VM's own,
// newMemFile) and zeish-img-<image dir>.mem (an image's, imageMemFile). A
// crash between launch and handle, or inside a capture, leaves such files
// behind: 2.9 GB were seen after a few crashes.

// PlanCapture plans by whose RAM the VM maps (vmm.PlanByRAM): QEMU
// captures a VM that owns its RAM by its device state alone.
func (d *Driver) PlanCapture(h *vmm.Handle, running, promote bool) vmm.CapturePlan {
	return vmm.PlanByRAM(h, running, promote)
}

// DiskFile names a qcow2 file.
func (d *Driver) DiskFile(base string) string { return base + ".qcow2" }

// DiscardImage removes an image's RAM file and state file; without img,
// the RAM file a capture into dir names (one that crashed before the
// caller recorded the image).
func (d *Driver) DiscardImage(dir string, img *vmm.Image) error {
	if img != nil {
		return removeFiles(img.MemFile, img.StateFile)
	}
	return removeFiles(d.imageMemFile(dir), partMemFile(d.imageMemFile(dir)))
}

// Forget removes every RAM file named for sandbox id: one a VM made before
// zeishd died and before its handle was recorded has no handle to be found by.
func (d *Driver) Forget(id string) error {
	files, _ := filepath.Glob(filepath.Join(d.shmDir, "zeish-"+id+"-*.mem"))
	for _, f := range files {
		d.log.Info("destroy: removing RAM file", logKeySandbox, id, "file", f)
	}
	return removeFiles(files...)
}

// Sweep kills stray VMMs, then removes RAM files no VM maps.
func (d *Driver) Sweep(ctx context.Context, s vmm.SweepScope) {
	d.sweepProcesses(s)
	d.sweepRAM(ctx, s)
}

// sweepProcesses kills VMM processes working under s.Root for sandboxes
// that are not live, and second VMMs of live ones (a fork's continuation or
// a promotion's receiver, launched ahead when zeishd died): a crash can
// leave one behind before its handle was saved.
func (d *Driver) sweepProcesses(s vmm.SweepScope) {
	marker := filepath.Clean(s.Root) + "/"
	var killed []int
	for _, p := range procscan.All() {
		// Only VMMs: a user's process that merely names a sandbox path
		// (a shell in it, a backup) is not ours to kill.
		if !isVMM(p.Args) {
			continue
		}
		id, dir := "", ""
		for _, arg := range p.Args {
			_, rest, ok := strings.Cut(arg, marker)
			if !ok {
				continue
			}
			sid, sub, _ := strings.Cut(rest, "/")
			if id == "" {
				id = sid
			}
			if vm, _, _ := strings.Cut(sub, "/"); sid == id && strings.HasPrefix(vm, "vm-") && dir == "" {
				dir = filepath.Join(marker, sid, vm)
			}
		}
		if id == "" {
			continue
		}
		liveDir, live := s.Live[id]
		why := ""
		switch {
		case !live:
			why = "recover: killing orphaned VMM process"
		case dir != "" && liveDir != "" && dir != filepath.Clean(liveDir):
			why = "recover: killing a second VMM of a live sandbox"
		default:
			continue
		}
		d.log.Warn(why, logKeySandbox, id, logKeyPID, p.PID, "dir", dir)
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			d.log.Error("kill orphan", logKeyPID, p.PID, "err", err)
		}
		killed = append(killed, p.PID)
	}
	// Gone before the RAM sweep looks for files no process maps.
	for deadline := time.Now().Add(10 * time.Second); len(killed) > 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		killed = slices.DeleteFunc(killed, func(pid int) bool { return procscan.Args(pid) == nil })
	}
}

// isVMM reports whether a command line is a zeish VMM's: it names itself
// with -name zeish-<sandbox id> (tagOf).
func isVMM(args []string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-name" && strings.HasPrefix(args[i+1], tagOf(sandbox.PrefixSandbox)) {
			return true
		}
	}
	return false
}

// sweepRAM removes RAM files of sandboxes s knows that nothing maps or will
// load: no live process names them, and no handle refers to them. Files of
// sandboxes s does not know are another zeishd's and stay.
func (d *Driver) sweepRAM(ctx context.Context, s vmm.SweepScope) {
	entries, err := os.ReadDir(d.shmDir)
	if err != nil {
		return
	}
	inUse := procscan.OptionValues("mem-path")
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, tagOf(sandbox.PrefixSandbox))
		if !ok || !strings.HasSuffix(name, ".mem") {
			continue
		}
		suffix, _, _ := strings.Cut(rest, "-")
		id := sandbox.PrefixSandbox + suffix
		path := filepath.Join(d.shmDir, name)
		if inUse[path] {
			continue
		}
		h, known := s.Handle(ctx, id)
		if !known {
			continue // not ours, or not known to be
		}
		if h != nil && (h.MemFile == path || (h.Spec.From != nil && h.Spec.From.MemFile == path)) {
			continue
		}
		if st, err := os.Stat(path); err == nil {
			d.log.Warn("recover: removing orphaned RAM file", logKeySandbox, id, "file", path, "mib", st.Size()>>20)
			os.Remove(path)
		}
	}
}
