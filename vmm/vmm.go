// Package vmm is the seam between zeish and the virtual-machine monitor. Nothing
// above it knows which VMM runs a sandbox: the node talks to a Driver, keeps the
// Handle it returns (persisted, so a restarted zeishd finds its VMs again) and
// reads declared Capabilities instead of probing for "unsupported" errors.
package vmm

import (
	"context"
	"net"
	"time"
)

// Accel is the CPU virtualisation a driver uses.
type Accel string

const (
	AccelKVM Accel = "kvm" // hardware virtualisation through /dev/kvm
	AccelTCG Accel = "tcg" // software emulation, where /dev/kvm is missing
)

// Capabilities declares what a driver can do on this host.
type Capabilities struct {
	Name  string `json:"name"`  // "qemu"
	Accel Accel  `json:"accel"` // chosen once, at New
	// AccelReason says why Accel was chosen ("probe booted the guest
	// kernel under KVM", "no /dev/kvm", …); AccelProbeMS what the probe took.
	AccelReason  string `json:"accel_reason"`
	AccelProbeMS int64  `json:"accel_probe_ms"`
	LiveFork     bool   `json:"live_fork"` // fork a running VM with copy-on-write memory
	Suspend      bool   `json:"suspend"`   // save a VM to disk and resume it later
	// LiveCapture: CaptureLive captures any VM, whoever owns its RAM, into
	// a new image while the guest keeps running; it pauses only for the
	// switch-over, for a time that does not grow with its memory.
	LiveCapture bool `json:"live_capture"`
	// Confinement says how VMMs are confined ("" when they are not), e.g.
	// "user zeish-vm, chroot, cgroup v1 memory cpu pids".
	Confinement string `json:"confinement,omitempty"`
}

// RunState is what the VMM reports about a live VM's CPUs.
type RunState string

const (
	RunStateRunning RunState = "running"
	RunStatePaused  RunState = "paused"
	// RunStateOther covers the VMM's transient or special states (for QEMU:
	// inmigrate, postmigrate, shutdown, internal-error, …).
	RunStateOther RunState = "other"
)

// Spec says what to boot.
type Spec struct {
	ID         string `json:"id"`  // sandbox id; names files and tags the process for recovery
	Dir        string `json:"dir"` // private directory for this VM's files, made by the caller
	Kernel     string `json:"kernel"`
	Initrd     string `json:"initrd"`
	KernelArgs string `json:"kernel_args"`
	// BaseDisk, when set, makes Start create the VM's writable overlay (Disk)
	// backed by it: the template's base image or a frozen layer of a fork.
	BaseDisk string `json:"base_disk,omitempty"`
	// Disk is the VM's writable qcow2 overlay; default <Dir>/disk.qcow2.
	// Without BaseDisk it must exist (a sandbox resuming on its own disk).
	Disk      string `json:"disk,omitempty"`
	DiskMiB   int    `json:"disk_mib"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
	MAC       string `json:"mac"`
	// NIC backs the guest's network card with a host TAP device. Without it
	// the card has no way out (QEMU user mode, restricted), and with NoNIC
	// the VM has no network card at all. A fork child keeps the device set
	// of its parent, so NoNIC is inherited.
	NIC   *NIC `json:"nic,omitempty"`
	NoNIC bool `json:"no_nic,omitempty"`
	// From starts the VM from a captured Image instead of booting the kernel.
	From *Image `json:"from,omitempty"`
	// Paused leaves a VM started From an image paused after loading it.
	Paused bool `json:"paused,omitempty"`
	// Deferred launches a VM for From without loading it: Load does that
	// later. From's files may not exist yet, except MemFile, which the VMM
	// maps at launch (a file being captured right then, renamed after).
	// Launching ahead is how a fork keeps the parent's pause short.
	Deferred bool `json:"deferred,omitempty"`
}

// NIC is a network card on a host TAP device the caller made (multi-queue,
// so that two VMMs, a VM and its continuation, may hold it at once).
type NIC struct {
	TAP string `json:"tap"`
	MAC string `json:"mac"`
}

// Image is a VM captured at one instant: its memory and device state. (Its
// disk is wherever the caller keeps the overlay it had.) Images are
// immutable: many VMs may start from one, mapping MemFile copy-on-write.
type Image struct {
	Dir string `json:"dir"`
	// MemFile is the guest RAM, frozen: nothing writes to it any more. Empty
	// when the RAM is saved inside StateFile (a full capture).
	MemFile   string `json:"mem_file,omitempty"`
	StateFile string `json:"state_file"`
	MemoryMiB int    `json:"memory_mib"`
}

// Handle is what it takes to find and control a VM again after zeishd restarts.
// It is persisted as JSON with the sandbox.
type Handle struct {
	Spec        Spec   `json:"spec"`
	PID         int    `json:"pid"`
	Accel       Accel  `json:"accel"`
	QMPSocket   string `json:"qmp_socket"`
	AgentSocket string `json:"agent_socket"`
	MemFile     string `json:"mem_file"` // guest RAM backing file (under /dev/shm)
	// MemShared: the VM owns MemFile and maps it shared, so it can be
	// captured by saving device state only. A VM started from an image maps
	// the image's file privately (copy-on-write) instead.
	MemShared bool   `json:"mem_shared"`
	Disk      string `json:"disk"` // the VM's writable qcow2 overlay
	// Confined: the VMM runs as an unprivileged user, chrooted into
	// Spec.Dir, in a cgroup of its own.
	Confined bool `json:"confined,omitempty"`
	// Origin is what the VMM was launched as when that is no longer Spec: a
	// ready VM started for a placeholder and adopted by a sandbox (Adopt)
	// keeps the name and QMP path on its command line, and its cgroup.
	Origin *Origin `json:"origin,omitempty"`
}

// Origin names the placeholder a VM was launched for (Handle.Origin).
type Origin struct {
	ID        string `json:"id"`
	Dir       string `json:"dir"`
	QMPSocket string `json:"qmp_socket"`
}

// DiskSwap says where CaptureLive leaves a VM's disk. The overlay the VM
// wrote until the switch-over is frozen, read-only from then on, as Frozen
// (the image's disk layer, a hard link); the VM goes on writing Next, a new
// overlay backed by Frozen. Both paths are on the filesystem of the VM's
// current overlay and do not exist yet.
type DiskSwap struct {
	Frozen string `json:"frozen"`
	Next   string `json:"next"`
}

// Driver runs VMs on one host.
type Driver interface {
	Capabilities() Capabilities
	// Start launches a VM and returns once the VMM runs; the guest may still be
	// booting. The VM's lifetime is not ctx's: cancelling ctx only abandons the
	// launch (and then nothing it made is left behind).
	Start(ctx context.Context, spec Spec) (*Handle, error)
	// Alive reports whether h's VMM process still runs and is the one we started.
	Alive(h *Handle) bool
	// Pause freezes the guest's CPUs; Resume lets them run again.
	Pause(ctx context.Context, h *Handle) error
	Resume(ctx context.Context, h *Handle) error
	// State asks the VMM whether h's guest runs or is paused, e.g. to restore
	// a sandbox's state after zeishd restarts. It fails if the VMM is gone.
	State(ctx context.Context, h *Handle) (RunState, error)
	// ConsoleTail returns the last max bytes of h's guest console (its
	// kernel's and init's words), "" when there are none: the cause of a
	// boot that failed.
	ConsoleTail(h *Handle, max int) string
	// DialAgent connects to the guest-agent channel of h.
	DialAgent(ctx context.Context, h *Handle) (net.Conn, error)
	// Destroy stops the VM (politely, then by force) and removes every file
	// the driver made for it. Destroying a VM that is already gone is not an error.
	Destroy(ctx context.Context, h *Handle) error

	// Adopt gives a VM started From an image (a ready VM, launched before
	// anyone asked for it) to spec, which must ask for the same machine from
	// the same image: the VM's folder becomes spec.Dir (renamed; spec.Dir,
	// if it exists, must be empty), its disk spec.Disk, and its ID spec.ID.
	// h is spent; the guest runs (or not) as it did.
	Adopt(ctx context.Context, h *Handle, spec Spec) (*Handle, error)

	// Load completes a VM started Deferred: it loads img (which replaces
	// h.Spec.From and sets h.MemFile) and, if run, lets the guest go on.
	Load(ctx context.Context, h *Handle, img *Image, run bool) error

	// Capture stops h's guest for good and saves it into dir as an Image; the
	// VMM exits and its disk is left as it is. Without full only device state
	// is written and h's RAM file becomes the image's memory, which needs
	// h.MemShared (CaptureLive or Promote a VM that lacks it); with full the RAM is written
	// into the state file and h's own RAM file is removed. stoppedAt is when
	// the guest stopped running, to measure pauses.
	Capture(ctx context.Context, h *Handle, dir string, full bool) (img *Image, stoppedAt time.Time, err error)
	// Promote moves h's guest into a new VM in dir that owns its RAM
	// (MemShared) and returns the new handle; h's VMM exits. downtime is how
	// long the guest did not run.
	Promote(ctx context.Context, h *Handle, dir string) (nh *Handle, downtime time.Duration, err error)

	// CaptureLive captures h's running guest into dir as an Image while it
	// goes on running in the same VMM (a paused guest is refused): its memory is copied while
	// it runs and the guest is stopped only to switch over, so the pause is
	// flat in RAM size (a driver may instead copy, in the pause, only the
	// pages the guest wrote since it started from its image, when they are
	// few: QEMU's delta.go). The disk is frozen at the same instant as swap
	// says. h.Disk always names the overlay the VM writes when it returns,
	// error or not: swap.Next once the disk was swapped. pause is how long
	// the guest did not run.
	CaptureLive(ctx context.Context, h *Handle, dir string, swap DiskSwap) (img *Image, pause time.Duration, err error)
	// SettleCapture makes whole a VM whose CaptureLive into dir was cut short
	// (zeishd died): its migration is cancelled, a guest the capture stopped
	// runs again if run, the capture's helpers and its image's memory and
	// state are removed, and h.Disk is set to the overlay the VM writes
	// (swap.Next once the disk was swapped; then swap.Frozen is kept, else
	// both paths are removed).
	SettleCapture(ctx context.Context, h *Handle, dir string, swap DiskSwap, run bool) error

	// Every capture adds a frozen layer under a VM's disk, and a deep chain
	// costs pause time at the next capture (the VMM reopens each layer).
	// These three let the node merge the frozen layers and move a running
	// VM onto the merge.
	//
	// DiskBacking names the file the disk file path is backed by ("" for
	// none), as the file records it.
	DiskBacking(path string) (string, error)
	// Relink records backing as the file the disk file path is backed by,
	// reading neither: backing holds what the old one did (the same layer,
	// copied to another path or host: an image fetched from the image
	// store). path must not be open.
	Relink(ctx context.Context, path, backing string) error
	// MergeLayers writes out, a new layer holding everything the chain from
	// top down to base (base excluded) holds, backed by base. The chain's
	// layers must be frozen; out must not exist.
	MergeLayers(ctx context.Context, top, base, out string) error
	// Rebase puts the overlay h writes on layer, whose content must equal
	// that of the overlay's backing chain now (a MergeLayers of it) and whose
	// own backing must be in that chain. The guest goes on as it was; the
	// overlay records layer as its backing from then on.
	Rebase(ctx context.Context, h *Handle, layer string) error

	// PlanCapture says how h's guest is captured into an image it then runs
	// on from: running says whether the guest runs now, promote asks for
	// CapturePromote over CaptureLive where both would do (bench compares them).
	PlanCapture(h *Handle, running, promote bool) CapturePlan
	// DiskFile names a disk file of the driver's format: base plus the
	// format's extension ("disk-3" → "disk-3.qcow2").
	DiskFile(base string) string
	// DiscardImage removes the memory and state of an image captured into
	// dir (img nil: a capture that never completed, whose files the driver
	// finds by dir alone); dir itself and its disk layer are the caller's.
	DiscardImage(dir string, img *Image) error
	// Forget removes every file the driver keeps for sandbox id outside its
	// VMs' Dirs (a RAM file a VM made before its handle was recorded). Call
	// it once all the sandbox's VMs are destroyed.
	Forget(id string) error
	// Sweep removes what a crashed zeishd left behind: VMM processes of
	// sandboxes that are not live (and second VMMs of live ones), then
	// files no VM maps. Run at recovery, when no operation is in flight.
	Sweep(ctx context.Context, s SweepScope)
}

// CapturePlan is how a VM is captured (Driver.PlanCapture).
type CapturePlan string

const (
	// CaptureDevice: the VM owns its RAM (Handle.MemShared), so Capture
	// saves only its device state and its RAM file becomes the image's.
	CaptureDevice CapturePlan = "device"
	// CaptureLive: the VM's RAM is an image's; CaptureLive copies it while
	// the guest runs.
	CaptureLive CapturePlan = "live"
	// CapturePromote: the VM's RAM is an image's; Promote moves the guest
	// into a VM owning its RAM first (the guest stopped for the copy), then
	// CaptureDevice applies.
	CapturePromote CapturePlan = "promote"
)

// PlanByRAM is the plan of a driver whose VMs own their RAM or map an
// image's (Handle.MemShared): one that owns it saves its device state
// only; one that does not is captured live while it runs, and promoted when
// it is paused (it loses no run time to the copy and ends up as its own
// image, which later forks reuse) or when promote asks for it.
func PlanByRAM(h *Handle, running, promote bool) CapturePlan {
	switch {
	case h.MemShared:
		return CaptureDevice
	case running && !promote:
		return CaptureLive
	}
	return CapturePromote
}

// SweepScope tells Driver.Sweep which VMs and files are this node's and
// which of them are live.
type SweepScope struct {
	// Root holds the sandboxes' folders (<Root>/<sandbox id>/<VM dir>): a
	// VMM working under it is this node's, any other is not.
	Root string
	// Live maps every sandbox whose VM runs to that VM's Dir.
	Live map[string]string
	// Handle reports whether this node knows sandbox id and the handle it
	// keeps for it (nil: none). The files of sandboxes it does not know are
	// another zeishd's and stay.
	Handle func(ctx context.Context, id string) (h *Handle, known bool)
}
