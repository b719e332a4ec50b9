package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/vmm"
)

// qmpReadyTimeout bounds the first QMP handshake after launch.
const qmpReadyTimeout = 10 * time.Second

// maxSocketPath is sun_path's limit (108 bytes with the NUL).
const maxSocketPath = 107

var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// validate checks spec and returns it with absolute paths (QEMU's daemon
// chdirs to /).
func validate(spec vmm.Spec) (vmm.Spec, error) {
	bad := func(format string, a ...any) (vmm.Spec, error) {
		return vmm.Spec{}, fmt.Errorf("vm spec: %w: %s", errdefs.ErrInvalidArgument, fmt.Sprintf(format, a...))
	}
	if !validID.MatchString(spec.ID) {
		return bad("id %q: want 1-64 of [A-Za-z0-9_-]", spec.ID)
	}
	if spec.MemoryMiB <= 0 || spec.VCPUs <= 0 || spec.DiskMiB < 0 {
		return bad("memory_mib %d, vcpus %d, disk_mib %d: want positive sizes", spec.MemoryMiB, spec.VCPUs, spec.DiskMiB)
	}
	if spec.Disk == "" {
		spec.Disk = filepath.Join(spec.Dir, diskName)
	}
	paths := []*string{&spec.Dir, &spec.Kernel, &spec.Initrd, &spec.BaseDisk, &spec.Disk}
	if spec.From != nil {
		from := *spec.From
		spec.From = &from
		paths = append(paths, &spec.From.MemFile, &spec.From.StateFile)
	}
	for _, p := range paths {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return bad("path %q: %v", *p, err)
		}
		if strings.ContainsAny(abs, ",\x00\n'") {
			return bad("path %q: commas, quotes and newlines are not allowed", abs)
		}
		*p = abs
	}
	if fi, err := os.Stat(spec.Dir); spec.Dir == "" || err != nil || !fi.IsDir() {
		return bad("dir %q is not a directory", spec.Dir)
	}
	if n := len(filepath.Join(spec.Dir, agentName)); n > maxSocketPath {
		return bad("dir %q is too long for a unix socket path (%d > %d bytes)", spec.Dir, n, maxSocketPath)
	}
	files := map[string]string{"kernel": spec.Kernel, "initrd": spec.Initrd, "base disk": spec.BaseDisk}
	if spec.BaseDisk == "" {
		files["disk"] = spec.Disk // no overlay to make: the disk must exist
		delete(files, "base disk")
	}
	if spec.From != nil {
		if !spec.Deferred {
			files["image state"] = spec.From.StateFile
		}
		if spec.From.MemFile != "" {
			files["image memory"] = spec.From.MemFile
		}
		if spec.From.MemoryMiB != spec.MemoryMiB {
			return bad("image has %d MiB of memory, spec %d", spec.From.MemoryMiB, spec.MemoryMiB)
		}
	}
	for name, p := range files {
		if p == "" {
			if name == "initrd" {
				continue
			}
			return bad("%s missing", name)
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return bad("%s %q is not a readable file", name, p)
		}
	}
	return spec, nil
}

// Start creates the VM's overlay (when spec.BaseDisk is set) and launches
// QEMU: booting the kernel, or loading spec.From. It returns once QMP answers
// (and, with From, once the image is loaded and the guest runs again); a
// booting guest may still be starting. On any failure, ctx's end included,
// everything it made is removed and any QEMU it ran is killed.
func (d *Driver) Start(ctx context.Context, spec vmm.Spec) (_ *vmm.Handle, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start vm %q: %w", spec.ID, err)
	}
	spec, err = validate(spec)
	if err != nil {
		return nil, err
	}
	var undo rollback.Stack
	defer d.rollbackOnError(ctx, &undo, spec.ID, &err)
	if spec.BaseDisk != "" {
		if err := d.createOverlay(ctx, &undo, spec); err != nil {
			return nil, fmt.Errorf("overlay: %w", err)
		}
	}
	memFile, memShared := d.newMemFile(spec.ID), true
	if spec.From != nil && spec.From.MemFile != "" {
		memFile, memShared = spec.From.MemFile, false
	}
	h, err := d.launchVM(ctx, &undo, spec, memFile, memShared, spec.From != nil, spec.From != nil)
	if err != nil {
		return nil, err
	}
	if spec.From != nil && !spec.Deferred {
		if err := d.loadImage(ctx, h, spec.From, !spec.Paused); err != nil {
			return nil, fmt.Errorf("load image %s: %w", spec.From.Dir, err)
		}
	}
	// A cancel that lands after the last step still abandons the launch, so
	// callers can rely on "ctx ended ⇒ nothing left".
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("after start: %w", err)
	}
	undo.Release()
	return h, nil
}

// rollbackOnError undoes a failed start and decorates its error.
func (d *Driver) rollbackOnError(ctx context.Context, undo *rollback.Stack, id string, errp *error) {
	if *errp == nil {
		return
	}
	// Teardown must finish even though ctx may be what failed us.
	if rbErr := undo.Run(ctx); rbErr != nil {
		d.log.Error("vm start rollback incomplete", logKeySandbox, id, "err", rbErr)
		*errp = errors.Join(*errp, rbErr)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(*errp, ctxErr) {
		*errp = fmt.Errorf("%w (then: %w)", ctxErr, *errp)
	}
	*errp = fmt.Errorf("start vm %q: %w", id, *errp)
}

// tbSizeFor is the TCG translation cache of a VM that boots (incoming
// false) or loads an image (true).
func (d *Driver) tbSizeFor(incoming bool) int {
	if incoming {
		return d.cloneTBSizeMiB
	}
	return d.tbSizeMiB
}

func (d *Driver) newMemFile(id string) string {
	return filepath.Join(d.shmDir, fmt.Sprintf("zeish-%s-%s.mem", id, randomHex(4)))
}

// launchVM runs QEMU for spec with the given RAM file and waits for QMP.
// With incoming, QEMU waits for migrate-incoming instead of booting; with
// neverStart its guest stays stopped after that too.
func (d *Driver) launchVM(ctx context.Context, undo *rollback.Stack, spec vmm.Spec, memFile string, memShared, incoming, neverStart bool) (*vmm.Handle, error) {
	h := &vmm.Handle{
		Spec:        spec,
		Accel:       d.accel.Accel,
		QMPSocket:   filepath.Join(spec.Dir, qmpName),
		AgentSocket: filepath.Join(spec.Dir, agentName),
		MemFile:     memFile,
		MemShared:   memShared,
		Disk:        spec.Disk,
	}
	began := time.Now()
	undo.Add(func(context.Context) error {
		d.forgetQMP(h.QMPSocket)
		files := []string{h.QMPSocket, h.AgentSocket, pidFile(h), d.ConsoleLog(h), migrateSocket(h)}
		if h.MemShared {
			files = append(files, h.MemFile)
		}
		return removeFiles(files...)
	})
	// Stale files of an earlier VM in this Dir would mislead us (pidfile) or
	// block QEMU (sockets).
	if err := removeFiles(h.QMPSocket, h.AgentSocket, pidFile(h), d.ConsoleLog(h), migrateSocket(h)); err != nil {
		return nil, err
	}
	if d.confine != nil {
		h.Confined = true
		if err := d.confine.prepareDir(spec.Dir); err != nil {
			return nil, err
		}
	}
	if h.MemShared {
		if err := d.createMemFile(h.MemFile); err != nil {
			return nil, err
		}
	}
	kernel, initrd := spec.Kernel, spec.Initrd
	if incoming && kernel != "" && !d.noKernelStub {
		stub := filepath.Join(spec.Dir, kernelStubName)
		undo.Add(func(context.Context) error { return removeFiles(stub) })
		ok, err := writeKernelStub(kernel, stub)
		if err != nil {
			return nil, fmt.Errorf("kernel stub: %w", err)
		}
		if ok {
			kernel, initrd = stub, ""
		}
	}
	var files []*os.File
	mac, tapFD := spec.MAC, 0
	if spec.NIC != nil {
		tap, err := openTAPQueue(spec.NIC.TAP)
		if err != nil {
			return nil, err
		}
		defer tap.Close() // QEMU holds its own copy once it runs
		files, tapFD, mac = append(files, tap), 3, spec.NIC.MAC
	}
	args := buildArgs(launchConfig{
		Tag:           tagOf(spec.ID),
		Accel:         d.accel.Accel,
		TCGTBSizeMiB:  d.tbSizeFor(incoming),
		VCPUs:         spec.VCPUs,
		MemoryMiB:     spec.MemoryMiB,
		MemFile:       h.MemFile,
		MemShared:     h.MemShared,
		Kernel:        kernel,
		Initrd:        initrd,
		KernelArgs:    spec.KernelArgs,
		Disk:          h.Disk,
		DiskAIO:       d.aio,
		MAC:           mac,
		TAPFD:         tapFD,
		NoNIC:         spec.NoNIC,
		QMPSocket:     h.QMPSocket,
		AgentSocket:   h.AgentSocket,
		ConsoleLog:    d.ConsoleLog(h),
		PIDFile:       pidFile(h),
		IncomingDefer: incoming,
		Seccomp:       d.seccomp,
		NeverStart:    neverStart,
	})
	if d.confine != nil {
		args = append(args, d.confine.args(spec.Dir, d.version)...)
	}
	id := idOf(h)
	undo.Add(func(context.Context) error {
		pid, _ := readPIDFile(pidFile(h))
		err := killTagged(id, pid)
		if d.confine != nil {
			d.confine.leave(cgroupID(h))
		}
		return err
	})
	if err := launch(ctx, d.qemuPath, args, files...); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	launched := time.Since(began)
	if kernel != spec.Kernel {
		os.Remove(kernel) // read at QEMU's setup, which is over
	}
	if d.afterLaunch != nil {
		d.afterLaunch()
	}
	var err error
	if h.PID, err = readPIDFile(pidFile(h)); err != nil {
		return nil, fmt.Errorf("qemu daemonized but: %w", err)
	}
	if !isOurs(h.PID, id) {
		return nil, fmt.Errorf("qemu pid %d: %w: not running after setup", h.PID, errdefs.ErrUnavailable)
	}
	if d.confine != nil {
		if err := d.confine.join(cgroupID(h), h.PID, spec, d.log); err != nil {
			return nil, err
		}
		if d.joined != nil {
			d.joined(cgroupID(h))
		}
	}
	qctx, cancel := context.WithTimeout(ctx, qmpReadyTimeout)
	defer cancel()
	var st qmpStatus
	if err := d.withMonitor(qctx, h.QMPSocket, func(m *monitor) error {
		return m.execute(qctx, "query-status", nil, &st)
	}); err != nil {
		return nil, fmt.Errorf("first qmp contact: %w", err)
	}
	d.log.Info("vm started", logKeySandbox, spec.ID, logKeyPID, h.PID, "accel", d.accel.Accel, "incoming", incoming,
		"launch_ms", launched.Milliseconds(), "qmp_ready_ms", time.Since(began).Milliseconds())
	return h, nil
}

// createOverlay makes the VM's qcow2 overlay on top of spec.BaseDisk.
func (d *Driver) createOverlay(ctx context.Context, undo *rollback.Stack, spec vmm.Spec) error {
	args := []string{"create", "-q", "-f", "qcow2", "-b", spec.BaseDisk, "-F", "qcow2", spec.Disk}
	if spec.DiskMiB > 0 {
		// -u: do not open the backing file. It may be the disk of a VM that is
		// still running (a fork launching its continuation ahead), whose lock
		// would refuse us; with the size given there is nothing to read.
		args = []string{"create", "-q", "-u", "-f", "qcow2", "-b", spec.BaseDisk, "-F", "qcow2", spec.Disk,
			strconv.Itoa(spec.DiskMiB) + "M"}
	}
	if _, err := os.Lstat(spec.Disk); err == nil {
		return fmt.Errorf("overlay %s: %w: already exists", spec.Disk, errdefs.ErrInvalidState)
	}
	undo.Add(func(context.Context) error { return removeFiles(spec.Disk) })
	out, err := exec.CommandContext(ctx, d.qemuImgPath, args...).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("qemu-img create overlay: %w: %s", err, tail(string(out), 1024))
	}
	return nil
}

func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	return p, nil
}
