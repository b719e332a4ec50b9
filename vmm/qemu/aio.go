package qemu

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Disk files are opened with aio=io_uring where QEMU and the kernel have
// it. At the switch-over of a live capture QEMU reopens every layer of the
// disk inside the guest's pause, and each reopen is a handful of small
// reads: through the default thread pool each read is a hand-off to a
// worker and back (measured: ~1.7 ms per layer), through io_uring the
// main loop does them itself (~1.05 ms). Layers QEMU opens by itself from
// an overlay's header (the chain under a VM's disk at its start) keep the
// default; the ones the driver names get it: the VM's own overlay, every
// next overlay of a capture, a merged layer (layers.go).

// aioIOUring is the aio of the driver's file nodes where it works.
const aioIOUring = "io_uring"

// probeIOUring reports whether qemuPath can open a file with aio=io_uring
// here (built with liburing, and a kernel that lets this process set up a
// ring), under the same syscall filter as the VMs.
func probeIOUring(qemuPath string, seccomp bool) bool {
	f, err := os.CreateTemp("", "zeish-aio-probe-")
	if err != nil {
		return false
	}
	f.Close()
	defer os.Remove(f.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := []string{"-nodefaults", "-no-user-config", "-display", "none", "-machine", "none", "-S",
		"-blockdev", "driver=file,node-name=probe,filename=" + f.Name() + ",read-only=on,aio=" + aioIOUring,
		"-qmp", "stdio"}
	if seccomp {
		args = append(args, "-sandbox", sandboxArg)
	}
	cmd := exec.CommandContext(ctx, qemuPath, args...)
	cmd.Stdin = strings.NewReader(`{"execute":"qmp_capabilities"}` + "\n" + `{"execute":"quit"}` + "\n")
	cmd.WaitDelay = time.Second
	return cmd.Run() == nil
}

// fileNode is the -blockdev options of a file node, with the driver's aio.
func (d *Driver) fileNode(opts map[string]any) map[string]any {
	if d.aio != "" {
		opts["aio"] = d.aio
	}
	return opts
}
