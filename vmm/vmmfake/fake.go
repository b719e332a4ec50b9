// Package vmmfake is a vmm.Driver without a VMM, for tests of what sits on
// top of a driver (the node): every VM is a record in memory plus the files
// a caller needs at real paths (disk overlays, RAM files, image state), a
// stand-in process (so pids, Alive and kills behave as with a real VMM) and
// an in-process guest agent (guest.NewHostedServer). Failures can be
// injected into every operation (FailNth, SetHook), and VMs crashed (Kill).
//
// It passes the vmmtest conformance suite; what it cannot show is anything
// about a guest (memory contents, a kernel), or confinement.
package vmmfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
)

// Op names a driver operation, to count calls and inject failures.
type Op string

const (
	OpStart       Op = "start"
	OpLoad        Op = "load"
	OpAdopt       Op = "adopt"
	OpCapture     Op = "capture"
	OpCaptureLive Op = "capture_live"
	OpPromote     Op = "promote"
	OpSettle      Op = "settle_capture"
	OpPause       Op = "pause"
	OpResume      Op = "resume"
	OpState       Op = "state"
	OpDestroy     Op = "destroy"
	OpDialAgent   Op = "dial_agent"
	OpMerge       Op = "merge_layers"
	OpRebase      Op = "rebase"
)

// ErrInjected is wrapped by every failure FailNth injects.
var ErrInjected = errors.New("vmmfake: injected failure")

// Options configure a Driver.
type Options struct {
	// ShmDir holds the VMs' and images' RAM files (sparse, never written);
	// required, a test's temp dir.
	ShmDir string
	// Capabilities replaces the default ones (everything but confinement,
	// under TCG) when set.
	Capabilities *vmm.Capabilities
	Logger       *slog.Logger
}

// Driver is the fake vmm.Driver. Safe for concurrent use.
type Driver struct {
	shmDir string
	caps   vmm.Capabilities
	log    *slog.Logger

	mu    sync.Mutex
	vms   map[int]*vm // by pid
	calls map[Op]int
	fails map[Op][]int // call numbers that fail
	hook  func(op Op, id string) error
}

// vm is one fake VMM.
type vm struct {
	id    string
	h     vmm.Handle // the driver's copy: disk and memory as they are now
	state vmm.RunState
	// deferred: launched for an image not loaded yet (vmm.Spec.Deferred).
	deferred bool
	cmd      *exec.Cmd
	stdin    io.Closer
	exited   chan struct{}
	agent    *guest.Server
	ctx      context.Context // ends with the VM: its agent's connections close
	stop     context.CancelFunc
	hostname string
	configs  int
	// origin is what the stand-in was launched as, if it was adopted: as
	// QEMU's command line, it names the placeholder still (Sweep).
	origin *vmm.Origin
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a fake driver keeping RAM files in opts.ShmDir.
func New(opts Options) (*Driver, error) {
	if fi, err := os.Stat(opts.ShmDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("vmmfake: shm dir %q: %w", opts.ShmDir, errdefs.ErrInvalidArgument)
	}
	d := &Driver{shmDir: opts.ShmDir, log: opts.Logger, vms: map[int]*vm{}, calls: map[Op]int{}, fails: map[Op][]int{},
		caps: vmm.Capabilities{Name: "fake", Accel: vmm.AccelTCG, AccelReason: "fake driver: no VMM",
			LiveFork: true, Suspend: true, LiveCapture: true}}
	if opts.Capabilities != nil {
		d.caps = *opts.Capabilities
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d, nil
}

// FailNth makes the nth call of op from now on fail (1: the next one) with
// an error wrapping ErrInjected, before the call changes anything.
func (d *Driver) FailNth(op Op, nth int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fails[op] = append(d.fails[op], d.calls[op]+nth)
}

// SetHook sets fn (nil: none) to run at the start of every operation, with
// the sandbox id of its spec or handle: an error it returns fails the
// operation before it changes anything. fn may call Kill.
func (d *Driver) SetHook(fn func(op Op, id string) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hook = fn
}

// Calls reports how many times op was called.
func (d *Driver) Calls(op Op) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[op]
}

// enter counts a call of op and says whether it is to fail.
func (d *Driver) enter(op Op, id string) error {
	d.mu.Lock()
	d.calls[op]++
	n, hook := d.calls[op], d.hook
	failing := false
	for i, f := range d.fails[op] {
		if f == n {
			d.fails[op] = append(d.fails[op][:i:i], d.fails[op][i+1:]...)
			failing = true
			break
		}
	}
	d.mu.Unlock()
	if failing {
		return fmt.Errorf("%s of vm %q (call %d): %w", op, id, n, ErrInjected)
	}
	if hook != nil {
		return hook(op, id)
	}
	return nil
}

// Capabilities are the options' or the defaults.
func (d *Driver) Capabilities() vmm.Capabilities { return d.caps }

// Start launches a stand-in VMM for spec.
func (d *Driver) Start(ctx context.Context, spec vmm.Spec) (_ *vmm.Handle, err error) {
	if err := d.enter(OpStart, spec.ID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start vm %q: %w", spec.ID, err)
	}
	if err := validate(spec); err != nil {
		return nil, fmt.Errorf("start vm %q: %w", spec.ID, err)
	}
	var made []string // files to remove if the start fails
	defer func() {
		if err != nil {
			for _, f := range made {
				os.Remove(f)
			}
		}
	}()
	h := &vmm.Handle{Spec: spec, Accel: d.caps.Accel, Disk: spec.Disk}
	if h.Disk == "" {
		h.Disk = filepath.Join(spec.Dir, diskName)
	}
	if spec.BaseDisk != "" {
		if err := writeFile(h.Disk, "overlay of "+spec.BaseDisk); err != nil {
			return nil, err
		}
		made = append(made, h.Disk)
	}
	switch {
	case spec.From != nil && spec.From.MemFile != "":
		h.MemFile = spec.From.MemFile // mapped privately: copy-on-write
	default:
		h.MemFile = filepath.Join(d.shmDir, fmt.Sprintf("fake-%s-%s.mem", spec.ID, randomHex(4)))
		if err := newRAM(h.MemFile, spec.MemoryMiB); err != nil {
			return nil, err
		}
		made = append(made, h.MemFile)
		h.MemShared = true
	}
	state := vmm.RunStateRunning
	if spec.From != nil && (spec.Paused || spec.Deferred) {
		state = vmm.RunStatePaused
		if spec.Deferred {
			state = vmm.RunStateOther // waiting for its image, as QEMU's inmigrate
		}
	}
	v, err := d.launch(spec, h, state)
	if err != nil {
		return nil, err
	}
	v.deferred = spec.Deferred
	if err := ctx.Err(); err != nil {
		d.kill(v)
		return nil, fmt.Errorf("start vm %q: %w", spec.ID, err)
	}
	d.log.Info("vm started", "sandbox", spec.ID, "pid", h.PID)
	return h, nil
}

const (
	diskName  = "disk.img"
	stateName = "state.json"
)

// validate refuses what a real VMM could not start from, before anything
// is made.
func validate(spec vmm.Spec) error {
	if spec.ID == "" || spec.MemoryMiB <= 0 {
		return fmt.Errorf("spec needs an id and memory: %w", errdefs.ErrInvalidArgument)
	}
	need := []string{spec.Dir, spec.Kernel}
	if spec.BaseDisk != "" {
		need = append(need, spec.BaseDisk)
	} else {
		need = append(need, orDefault(spec.Disk, filepath.Join(spec.Dir, diskName)))
	}
	if spec.From != nil {
		need = append(need, spec.From.MemFile)
		if !spec.Deferred {
			need = append(need, spec.From.StateFile)
		}
	}
	for _, p := range need {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	if spec.Kernel == "" {
		return fmt.Errorf("spec has no kernel: %w", errdefs.ErrInvalidArgument)
	}
	if spec.From != nil && !spec.Deferred {
		return sameCard(spec.From, spec)
	}
	return nil
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// launch runs the stand-in process: a shell that waits on its stdin, named
// after the VM and its folder (as a VMM's command line is), which ends when
// killed or when the driver's process dies.
func (d *Driver) launch(spec vmm.Spec, h *vmm.Handle, state vmm.RunState) (*vm, error) {
	cmd := exec.Command("sh", "-c", "read _", "vmmfake", spec.ID, spec.Dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch stand-in VMM: %w", err)
	}
	h.PID = cmd.Process.Pid
	ctx, stop := context.WithCancel(context.Background())
	v := &vm{id: spec.ID, h: *h, state: state, cmd: cmd, stdin: stdin, exited: make(chan struct{}), ctx: ctx, stop: stop}
	v.agent = guest.NewHostedServer(d.log, "vmmfake", func(name string) {
		d.mu.Lock()
		v.hostname = name
		v.configs++
		d.mu.Unlock()
	})
	go func() {
		cmd.Wait()
		close(v.exited)
	}()
	d.mu.Lock()
	d.vms[h.PID] = v
	d.mu.Unlock()
	return v, nil
}

// kill ends v's process and agent and forgets v.
func (d *Driver) kill(v *vm) {
	v.stop()
	v.cmd.Process.Kill()
	v.stdin.Close()
	<-v.exited
	d.mu.Lock()
	if d.vms[v.h.PID] == v {
		delete(d.vms, v.h.PID)
	}
	d.mu.Unlock()
}

// lookup returns the live VM h names (pid and sandbox id), or nil.
func (d *Driver) lookup(h *vmm.Handle) *vm {
	d.mu.Lock()
	v := d.vms[h.PID]
	d.mu.Unlock()
	if v == nil || v.id != h.Spec.ID {
		return nil
	}
	select {
	case <-v.exited:
		return nil
	default:
		return v
	}
}

func (d *Driver) live(op Op, h *vmm.Handle) (*vm, error) {
	if err := d.enter(op, h.Spec.ID); err != nil {
		return nil, err
	}
	v := d.lookup(h)
	if v == nil {
		return nil, fmt.Errorf("%s vm %q: %w: its VMM is not running", op, h.Spec.ID, errdefs.ErrUnavailable)
	}
	return v, nil
}

// Alive reports whether h's stand-in process runs.
func (d *Driver) Alive(h *vmm.Handle) bool { return d.lookup(h) != nil }

// Kill makes h's VMM die on its own, as a crash or the OOM killer would:
// its files stay until Destroy.
func (d *Driver) Kill(h *vmm.Handle) {
	if v := d.lookup(h); v != nil {
		v.stop()
		syscall.Kill(h.PID, syscall.SIGKILL)
		<-v.exited
	}
}

// Pause freezes the guest.
func (d *Driver) Pause(_ context.Context, h *vmm.Handle) error {
	return d.setState(OpPause, h, vmm.RunStatePaused)
}

// Resume lets the guest run.
func (d *Driver) Resume(_ context.Context, h *vmm.Handle) error {
	return d.setState(OpResume, h, vmm.RunStateRunning)
}

func (d *Driver) setState(op Op, h *vmm.Handle, st vmm.RunState) error {
	v, err := d.live(op, h)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v.deferred {
		return fmt.Errorf("%s vm %q: its image is not loaded: %w", op, h.Spec.ID, errdefs.ErrInvalidState)
	}
	v.state = st
	return nil
}

// State reports whether the guest runs.
func (d *Driver) State(_ context.Context, h *vmm.Handle) (vmm.RunState, error) {
	v, err := d.live(OpState, h)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return v.state, nil
}

// ConsoleTail is the fake guest's one console line.
func (d *Driver) ConsoleTail(h *vmm.Handle, max int) string {
	s := "vmmfake: guest " + h.Spec.ID + " has no console\n"
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return s
}

// DialAgent connects to the VM's agent over a socket pair.
func (d *Driver) DialAgent(ctx context.Context, h *vmm.Handle) (net.Conn, error) {
	v, err := d.live(OpDialAgent, h)
	if err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	host, err := fileConn(fds[0], "host")
	if err != nil {
		syscall.Close(fds[1])
		return nil, err
	}
	guestEnd, err := fileConn(fds[1], "guest")
	if err != nil {
		host.Close()
		return nil, err
	}
	actx, stop := context.WithCancel(v.ctx)
	go func() {
		defer stop()
		select {
		case <-v.exited:
		case <-actx.Done():
		}
		guestEnd.Close()
	}()
	go func() {
		defer stop()
		v.agent.ServeConn(actx, guestEnd)
	}()
	return host, nil
}

func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return net.FileConn(f)
}

// Destroy ends h's VMM and removes the files the driver made for it.
func (d *Driver) Destroy(_ context.Context, h *vmm.Handle) error {
	if err := d.enter(OpDestroy, h.Spec.ID); err != nil {
		return err
	}
	d.mu.Lock()
	v := d.vms[h.PID]
	d.mu.Unlock()
	if v != nil && v.id == h.Spec.ID {
		d.kill(v)
	}
	return removeFiles(d.ownedFiles(h)...)
}

// ownedFiles are the files Destroy removes: the VM's overlay if it has the
// default name in its folder, and its RAM file if the VM owns it.
func (d *Driver) ownedFiles(h *vmm.Handle) []string {
	var files []string
	if h.Spec.Dir != "" && h.Disk == filepath.Join(h.Spec.Dir, diskName) {
		files = append(files, h.Disk)
	}
	if h.MemShared && strings.HasPrefix(filepath.Base(h.MemFile), "fake-"+h.Spec.ID+"-") && filepath.Dir(h.MemFile) == d.shmDir {
		files = append(files, h.MemFile)
	}
	return files
}

// imageState is what an image's state file holds.
type imageState struct {
	ID        string `json:"id"`
	MemoryMiB int    `json:"memory_mib"`
	Full      bool   `json:"full"` // the RAM is in this file
	NoNIC     bool   `json:"no_nic,omitempty"`
}

// sameCard refuses to load an image into a machine with another set of
// devices, as QEMU does: a machine with a network card does not load into
// one without (and the other way round).
func sameCard(img *vmm.Image, spec vmm.Spec) error {
	b, err := os.ReadFile(img.StateFile)
	var s imageState
	if err != nil || json.Unmarshal(b, &s) != nil {
		return nil // not the fake's capture: nothing to compare
	}
	if s.NoNIC != spec.NoNIC {
		return fmt.Errorf("%w: the image's machine has no_nic=%v, the VM no_nic=%v", errdefs.ErrInvalidArgument, s.NoNIC, spec.NoNIC)
	}
	return nil
}

func writeState(path string, s imageState) error {
	b, _ := json.Marshal(s)
	return os.WriteFile(path, b, 0o600)
}

// Adopt hands a VM started from an image to spec: its folder is
// renamed to spec.Dir and its disk linked to spec.Disk, as QEMU's driver does.
func (d *Driver) Adopt(_ context.Context, h *vmm.Handle, spec vmm.Spec) (*vmm.Handle, error) {
	v, err := d.live(OpAdopt, h)
	if err != nil {
		return nil, err
	}
	if h.Spec.From == nil || h.Spec.Deferred {
		return nil, fmt.Errorf("adopt vm %q: %w: not started from an image", h.Spec.ID, errdefs.ErrInvalidState)
	}
	if spec.From == nil || spec.From.Dir != h.Spec.From.Dir || spec.MemoryMiB != h.Spec.MemoryMiB || spec.VCPUs != h.Spec.VCPUs {
		return nil, fmt.Errorf("adopt vm %q: %w: another machine", h.Spec.ID, errdefs.ErrInvalidArgument)
	}
	if spec.Disk == "" {
		spec.Disk = filepath.Join(spec.Dir, diskName)
	}
	os.Remove(spec.Dir) // empty, or the rename fails
	if err := os.Rename(h.Spec.Dir, spec.Dir); err != nil {
		return nil, fmt.Errorf("adopt vm %q: %w", h.Spec.ID, err)
	}
	if h.Disk != spec.Disk {
		if err := os.Link(h.Disk, spec.Disk); err != nil {
			return nil, errors.Join(err, os.Rename(spec.Dir, h.Spec.Dir))
		}
		os.Remove(h.Disk)
	}
	nh := *h
	if nh.Origin == nil {
		nh.Origin = &vmm.Origin{ID: h.Spec.ID, Dir: h.Spec.Dir, QMPSocket: h.QMPSocket}
	}
	spec.From = h.Spec.From
	nh.Spec, nh.Disk = spec, spec.Disk
	d.mu.Lock()
	v.id, v.h.Spec, v.h.Disk, v.origin = spec.ID, spec, spec.Disk, nh.Origin
	d.mu.Unlock()
	return &nh, nil
}

// Load loads img into a VM started Deferred.
func (d *Driver) Load(_ context.Context, h *vmm.Handle, img *vmm.Image, run bool) error {
	v, err := d.live(OpLoad, h)
	if err != nil {
		return err
	}
	if _, err := os.Stat(img.StateFile); err != nil {
		return fmt.Errorf("load vm %q: %w", h.Spec.ID, err)
	}
	if err := sameCard(img, h.Spec); err != nil {
		return fmt.Errorf("load vm %q: %w", h.Spec.ID, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !v.deferred {
		return fmt.Errorf("load vm %q: it was not started deferred: %w", h.Spec.ID, errdefs.ErrInvalidState)
	}
	v.deferred = false
	h.Spec.From, h.MemFile = img, img.MemFile
	v.h.Spec.From, v.h.MemFile = img, img.MemFile
	v.state = vmm.RunStatePaused
	if run {
		v.state = vmm.RunStateRunning
	}
	return nil
}

// Capture stops the guest for good and saves it into dir.
func (d *Driver) Capture(_ context.Context, h *vmm.Handle, dir string, full bool) (*vmm.Image, time.Time, error) {
	if err := d.enter(OpCapture, h.Spec.ID); err != nil {
		return nil, time.Time{}, err
	}
	if !full && !h.MemShared {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: its RAM is an image's, not its own (promote it first): %w", h.Spec.ID, errdefs.ErrInvalidState)
	}
	v := d.lookup(h)
	if v == nil {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: %w: its VMM is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	img := &vmm.Image{Dir: dir, StateFile: filepath.Join(dir, stateName), MemoryMiB: h.Spec.MemoryMiB}
	stoppedAt := time.Now()
	if err := writeState(img.StateFile, imageState{ID: h.Spec.ID, MemoryMiB: h.Spec.MemoryMiB, Full: full, NoNIC: h.Spec.NoNIC}); err != nil {
		return nil, time.Time{}, fmt.Errorf("capture vm %q: %w", h.Spec.ID, err)
	}
	if !full {
		img.MemFile = d.imageMemFile(dir)
		if err := os.Rename(h.MemFile, img.MemFile); err != nil {
			os.Remove(img.StateFile)
			return nil, time.Time{}, fmt.Errorf("capture vm %q: keep its RAM: %w", h.Spec.ID, err)
		}
		os.Chmod(img.MemFile, 0o600)
	}
	d.kill(v)
	if full && h.MemShared {
		os.Remove(h.MemFile)
	}
	return img, stoppedAt, nil
}

func (d *Driver) imageMemFile(dir string) string {
	return filepath.Join(d.shmDir, "fake-img-"+filepath.Base(dir)+".mem")
}

// Promote moves the guest into a new VM in dir that owns its RAM.
func (d *Driver) Promote(ctx context.Context, h *vmm.Handle, dir string) (*vmm.Handle, time.Duration, error) {
	v, err := d.live(OpPromote, h)
	if err != nil {
		return nil, 0, err
	}
	stopped := time.Now()
	spec := h.Spec
	spec.Dir, spec.From, spec.BaseDisk, spec.Paused, spec.Deferred, spec.Disk = dir, nil, "", false, false, h.Disk
	if err := validate(spec); err != nil {
		return nil, 0, fmt.Errorf("promote vm %q: %w", h.Spec.ID, err)
	}
	nh := &vmm.Handle{Spec: spec, Accel: d.caps.Accel, Disk: h.Disk, MemShared: true,
		MemFile: filepath.Join(d.shmDir, fmt.Sprintf("fake-%s-%s.mem", spec.ID, randomHex(4)))}
	if err := newRAM(nh.MemFile, spec.MemoryMiB); err != nil {
		return nil, 0, err
	}
	d.mu.Lock()
	state := v.state
	d.mu.Unlock()
	if _, err := d.launch(spec, nh, state); err != nil {
		os.Remove(nh.MemFile)
		return nil, 0, err
	}
	d.kill(v)
	if h.MemShared {
		os.Remove(h.MemFile)
	}
	return nh, max(time.Since(stopped), time.Microsecond), nil
}

// CaptureLive copies the guest into dir while it runs on, on swap.Next.
func (d *Driver) CaptureLive(_ context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap) (*vmm.Image, time.Duration, error) {
	v, err := d.live(OpCaptureLive, h)
	if err != nil {
		return nil, 0, err
	}
	if swap.Frozen == "" || swap.Next == "" {
		return nil, 0, fmt.Errorf("capture vm %q live: no disk swap: %w", h.Spec.ID, errdefs.ErrInvalidArgument)
	}
	d.mu.Lock()
	state := v.state
	d.mu.Unlock()
	if state != vmm.RunStateRunning {
		return nil, 0, fmt.Errorf("capture vm %q live: its guest is %s: %w", h.Spec.ID, state, errdefs.ErrInvalidState)
	}
	img := &vmm.Image{Dir: dir, StateFile: filepath.Join(dir, stateName), MemFile: d.imageMemFile(dir), MemoryMiB: h.Spec.MemoryMiB}
	if err := newRAM(img.MemFile, h.Spec.MemoryMiB); err != nil {
		return nil, 0, err
	}
	if err := writeState(img.StateFile, imageState{ID: h.Spec.ID, MemoryMiB: h.Spec.MemoryMiB, NoNIC: h.Spec.NoNIC}); err != nil {
		os.Remove(img.MemFile)
		return nil, 0, err
	}
	stopped := time.Now()
	if err := os.Link(h.Disk, swap.Frozen); err != nil {
		removeFiles(img.MemFile, img.StateFile)
		return nil, 0, fmt.Errorf("capture vm %q live: freeze disk: %w", h.Spec.ID, err)
	}
	if err := writeFile(swap.Next, "overlay of "+swap.Frozen); err != nil {
		removeFiles(img.MemFile, img.StateFile, swap.Frozen)
		return nil, 0, fmt.Errorf("capture vm %q live: new overlay: %w", h.Spec.ID, err)
	}
	d.mu.Lock()
	h.Disk, v.h.Disk = swap.Next, swap.Next
	d.mu.Unlock()
	return img, max(time.Since(stopped), time.Microsecond), nil
}

// SettleCapture makes whole a VM whose CaptureLive into dir was cut short:
// the image's memory and state go, the guest runs again if run, and h.Disk
// is swap.Next only if the VM writes it.
func (d *Driver) SettleCapture(_ context.Context, h *vmm.Handle, dir string, swap vmm.DiskSwap, run bool) error {
	v, err := d.live(OpSettle, h)
	if err != nil {
		return err
	}
	removeFiles(d.imageMemFile(dir), filepath.Join(dir, stateName))
	d.mu.Lock()
	defer d.mu.Unlock()
	if run && v.state == vmm.RunStatePaused {
		v.state = vmm.RunStateRunning
	}
	if v.h.Disk == swap.Next {
		h.Disk = swap.Next
		return nil
	}
	removeFiles(swap.Frozen, swap.Next)
	return nil
}

// PlanCapture plans as the QEMU driver does (vmm.PlanByRAM).
func (d *Driver) PlanCapture(h *vmm.Handle, running, promote bool) vmm.CapturePlan {
	return vmm.PlanByRAM(h, running, promote)
}

// DiskFile names the fake's disks *.img, so a caller that assumes qcow2
// shows up in its tests.
func (d *Driver) DiskFile(base string) string { return base + ".img" }

// DiscardImage removes an image's RAM and state (without img: the RAM file
// a capture into dir names).
func (d *Driver) DiscardImage(dir string, img *vmm.Image) error {
	if img == nil {
		return removeFiles(d.imageMemFile(dir))
	}
	return removeFiles(img.MemFile, img.StateFile)
}

// Forget removes the RAM files named for sandbox id.
func (d *Driver) Forget(id string) error {
	files, _ := filepath.Glob(filepath.Join(d.shmDir, "fake-"+id+"-*.mem"))
	return removeFiles(files...)
}

// Sweep kills the driver's VMs under s.Root that are not s's live ones,
// then removes RAM files of sandboxes s knows that no VM or handle uses.
func (d *Driver) Sweep(ctx context.Context, s vmm.SweepScope) {
	root := filepath.Clean(s.Root) + "/"
	d.mu.Lock()
	var strays []*vm
	inUse := map[string]bool{}
	for _, v := range d.vms {
		id, dir := v.id, v.h.Spec.Dir
		if v.origin != nil {
			id, dir = v.origin.ID, v.origin.Dir
		}
		if !strings.HasPrefix(dir, root) {
			inUse[v.h.MemFile] = true
			continue
		}
		if live, ok := s.Live[id]; !ok || filepath.Clean(live) != filepath.Clean(dir) {
			strays = append(strays, v)
			continue
		}
		inUse[v.h.MemFile] = true
	}
	d.mu.Unlock()
	for _, v := range strays {
		d.log.Warn("sweep: killing a stray VM", "sandbox", v.id, "pid", v.h.PID)
		d.kill(v)
	}
	files, _ := filepath.Glob(filepath.Join(d.shmDir, "fake-sbx_*.mem"))
	for _, f := range files {
		if inUse[f] {
			continue
		}
		rest := strings.TrimPrefix(filepath.Base(f), "fake-")
		id := rest[:strings.LastIndex(rest, "-")]
		h, known := s.Handle(ctx, id)
		if !known || (h != nil && (h.MemFile == f || (h.Spec.From != nil && h.Spec.From.MemFile == f))) {
			continue
		}
		os.Remove(f)
	}
}

// VM is what a test may want to know of a running fake VM.
type VM struct {
	Handle   vmm.Handle
	State    vmm.RunState
	Hostname string // as the guest agent was last configured
	Configs  int    // how many times the guest was configured
}

// VMs lists the driver's running VMs.
func (d *Driver) VMs() []VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []VM
	for _, v := range d.vms {
		select {
		case <-v.exited:
			continue
		default:
		}
		out = append(out, VM{Handle: v.h, State: v.state, Hostname: v.hostname, Configs: v.configs})
	}
	return out
}

// Close kills every VM the driver still runs; their files stay.
func (d *Driver) Close() {
	d.mu.Lock()
	vms := make([]*vm, 0, len(d.vms))
	for _, v := range d.vms {
		vms = append(vms, v)
	}
	d.mu.Unlock()
	for _, v := range vms {
		d.kill(v)
	}
}

// newRAM makes a sparse RAM file of mib MiB, the driver's alone.
func newRAM(path string, mib int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(int64(mib) << 20)
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content+"\n"), 0o600)
}

func removeFiles(files ...string) error {
	var errs []error
	for _, f := range files {
		if f == "" {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
