// Package qemu is the QEMU driver of vmm: it builds the command line, makes
// each VM's files (qcow2 overlay, guest-RAM file in /dev/shm, sockets), runs
// QEMU as a daemon that outlives zeishd, and controls it over QMP.
//
// Guest RAM is always a share=on memory-backend-file so that a running VM can
// later be forked by saving only its device state (x-ignore-shared) while
// clones map the same file copy-on-write.
package qemu

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// Options configures a Driver. Zero values pick the defaults.
type Options struct {
	QEMUPath    string // default "qemu-system-x86_64" from PATH
	QEMUImgPath string // default "qemu-img" from PATH
	ShmDir      string // where guest-RAM files live; default /dev/shm
	// Accel is the accelerator asked for (ZEISH_ACCEL): "" proves KVM by
	// booting ProbeKernel under it, or falls back to TCG; see ChooseAccel.
	Accel vmm.Accel
	// ProbeKernel is the guest kernel the KVM probe boots (the template's).
	ProbeKernel string
	// AccelCache keeps the probe's verdict across restarts ("" = none).
	AccelCache string
	// Reprobe ignores a cached verdict.
	Reprobe bool
	// TCGTBSizeMiB caps QEMU's TCG translation cache (its largest own
	// allocation); 0 keeps QEMU's default. Ignored under KVM.
	TCGTBSizeMiB int
	// CloneTCGTBSizeMiB is the cap for VMs that do not boot but load an
	// image (fork children, a parent's continuation, restored snapshots,
	// promotion targets); 0 means TCGTBSizeMiB. Such a VM translates only
	// the code it runs from then on (an idle fork child ~24 MiB), not a
	// whole boot's, so a small cache costs it little and saves the most
	// where many idle children pack one host.
	CloneTCGTBSizeMiB int
	// Confine runs every VMM as VMUser (default DefaultVMUser, created if
	// missing), chrooted into its VM folder, in a cgroup of its own. Needs root.
	Confine bool
	VMUser  string
	// CgroupsOptional starts confined VMs even where their cgroup limits
	// (memory, CPU, tasks) cannot be set, logging each; by default that
	// refuses the driver (no controllers) or the VM's start.
	CgroupsOptional bool
	// NoSeccomp runs QEMU without its seccomp filter (-sandbox), for a QEMU
	// built without libseccomp. The default filters.
	NoSeccomp bool
	// NoInflate makes a live capture punch the holes its source's reads
	// allocated in the source's image right after the capture, as before
	// inflate.go (for the bench's comparison): every capture then pays them.
	NoInflate bool
	// LiveDowntimeMS is the downtime-limit of a live capture's migration
	// at first (default 5; it doubles every pass from the 6th on): lower
	// means more pre-copy passes and less left for the pass that runs with
	// the guest stopped.
	LiveDowntimeMS int
	// ThreadsAIO opens disk files with QEMU's default thread pool even where
	// io_uring works (aio.go; for the bench's comparison).
	ThreadsAIO bool
	// LiveSerialPrep prepares a live capture as before docs/fork.md's
	// "re-fork → first exec" work, for the bench's comparison: the receiver
	// launched only once the disk swap is prepared.
	LiveSerialPrep bool
	// DeltaMaxMiB is the most private RAM (pages written since it started
	// from its image) a VM may hold for a capture by its private pages
	// (delta.go); above it, or when negative, a capture migrates live.
	// 0: the default, 32.
	DeltaMaxMiB int
	// NoKernelStub gives a VM that loads an image its template's kernel and
	// initrd, as a booting VM gets, instead of a stub of the kernel
	// (kernelstub.go; for the bench's comparison).
	NoKernelStub bool
	Logger       *slog.Logger
}

// Driver runs VMs as QEMU processes on this host.
type Driver struct {
	qemuPath    string
	qemuImgPath string
	shmDir      string
	accel       AccelVerdict
	version     version
	tbSizeMiB   int
	// cloneTBSizeMiB is the translation cache of VMs started from an
	// image (Options.CloneTCGTBSizeMiB).
	cloneTBSizeMiB int
	log            *slog.Logger
	qmpLocks       sync.Map       // QMP socket path → chan struct{} (one session at a time)
	confine        *confinement   // nil: VMMs run unconfined
	background     sync.WaitGroup // sparsifyLater work; tests wait on it
	noInflate      bool           // punch a live capture's source image at once (inflate.go)
	// liveDowntimeMS is the downtime-limit of live captures: QEMU switches
	// over once it expects to send what is left in that long.
	liveDowntimeMS int
	liveSerialPrep bool // Options.LiveSerialPrep
	deltaMaxMiB    int  // Options.DeltaMaxMiB, defaulted
	noKernelStub   bool
	delta          deltaConfig
	deltaCaptures  atomic.Int64 // captures by private pages, for tests
	inflateMu      sync.Mutex
	inflated       inflations

	seccomp bool
	aio     string // aio of the file nodes the driver names (aio.go); "": QEMU's default

	afterLaunch func()              // test hook: runs once QEMU has daemonized
	joined      func(cgroup string) // test hook: a VMM joined its cgroup
}

var _ vmm.Driver = (*Driver)(nil)

// Log attribute keys.
const (
	logKeySandbox = "sandbox"
	logKeyPID     = "pid"
)

// cloneTBSize is the translation cache of VMs started from an image: their
// own setting, else the default's.
func cloneTBSize(o Options) int { return cmp.Or(o.CloneTCGTBSizeMiB, o.TCGTBSizeMiB) }

// New checks that QEMU is installed and chooses the accelerator.
func New(opts Options) (*Driver, error) {
	d := &Driver{
		qemuPath:       opts.QEMUPath,
		qemuImgPath:    opts.QEMUImgPath,
		shmDir:         opts.ShmDir,
		tbSizeMiB:      opts.TCGTBSizeMiB,
		cloneTBSizeMiB: cloneTBSize(opts),
		seccomp:        !opts.NoSeccomp,
		noInflate:      opts.NoInflate,
		liveDowntimeMS: cmp.Or(opts.LiveDowntimeMS, defaultLiveDowntimeMS),
		liveSerialPrep: opts.LiveSerialPrep,
		deltaMaxMiB:    cmp.Or(opts.DeltaMaxMiB, defaultDeltaMaxMiB),
		noKernelStub:   opts.NoKernelStub,
		inflated:       inflations{users: map[string]map[string]bool{}},
		log:            opts.Logger,
	}
	if d.qemuPath == "" {
		d.qemuPath = "qemu-system-x86_64"
	}
	if d.qemuImgPath == "" {
		d.qemuImgPath = "qemu-img"
	}
	if d.shmDir == "" {
		d.shmDir = "/dev/shm"
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	var err error
	for _, p := range []*string{&d.qemuPath, &d.qemuImgPath} {
		if *p, err = lookPath(*p); err != nil {
			return nil, err
		}
	}
	if d.version, err = qemuVersion(d.qemuPath); err != nil {
		return nil, err
	}
	if d.shmDir, err = filepath.Abs(d.shmDir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(d.shmDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("shm dir %s: %w: not a directory", d.shmDir, errdefs.ErrInvalidArgument)
	}
	if d.accel, err = ChooseAccel(context.Background(), AccelOptions{Requested: opts.Accel, QEMUPath: d.qemuPath,
		Kernel: opts.ProbeKernel, CacheFile: opts.AccelCache, Reprobe: opts.Reprobe}); err != nil {
		return nil, err
	}
	if !opts.ThreadsAIO && probeIOUring(d.qemuPath, d.seccomp) {
		d.aio = aioIOUring
	}
	if opts.Confine {
		name := opts.VMUser
		if name == "" {
			name = DefaultVMUser
		}
		if d.confine, err = newConfinement(name, opts.CgroupsOptional); err != nil {
			return nil, fmt.Errorf("confine VMMs: %w", err)
		}
		d.confine.sweep()
	}
	return d, nil
}

// Capabilities reports the driver's name and accelerator; it forks live,
// suspends (migrate.go) and captures any VM live (live.go).
func (d *Driver) Capabilities() vmm.Capabilities {
	c := vmm.Capabilities{Name: "qemu", Accel: d.accel.Accel, AccelReason: d.accel.Reason, AccelProbeMS: d.accel.ProbeMS,
		LiveFork: true, Suspend: true, LiveCapture: true}
	if d.confine != nil {
		c.Confinement = d.confine.describe()
	}
	return c
}

// Names of the files a VM has in its spec.Dir. Fixed names: one VM per Dir.
const (
	diskName    = "disk.qcow2"
	qmpName     = "qmp.sock"
	agentName   = "agent.sock"
	consoleName = "console.log"
	pidName     = "qemu.pid"
)

// ConsoleLog is the path of h's serial console log (the guest kernel's output
// when its command line has console=ttyS0): cite its tail in boot errors.
func (d *Driver) ConsoleLog(h *vmm.Handle) string {
	return filepath.Join(h.Spec.Dir, consoleName)
}

// ConsoleTail returns the last limit bytes of h's console log, from the start
// of a line.
func (d *Driver) ConsoleTail(h *vmm.Handle, limit int) string {
	f, err := os.Open(d.ConsoleLog(h))
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-int64(limit))
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	b = b[:n]
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

func pidFile(h *vmm.Handle) string { return filepath.Join(h.Spec.Dir, pidName) }

func tagOf(id string) string { return "zeish-" + id }

// idOf is how h's VMM process is recognised: by the name and QMP path on
// its command line, which an adopted VM keeps from its launch (Origin).
func idOf(h *vmm.Handle) identity {
	if o := h.Origin; o != nil {
		return identityOf(tagOf(o.ID), o.QMPSocket)
	}
	return identityOf(tagOf(h.Spec.ID), h.QMPSocket)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
