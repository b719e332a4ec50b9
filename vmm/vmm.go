// Package vmm is the seam between zeish and the virtual-machine monitor. Nothing
// above it knows which VMM runs a sandbox: the node talks to a Driver, keeps the
// Handle it returns (persisted, so a restarted zeishd finds its VMs again) and
// reads declared Capabilities instead of probing for "unsupported" errors.
package vmm

import (
	"context"
	"net"
)

// Accel is the CPU virtualisation a driver uses.
type Accel string

const (
	AccelKVM Accel = "kvm" // hardware virtualisation through /dev/kvm
	AccelTCG Accel = "tcg" // software emulation, where /dev/kvm is missing
)

// Capabilities declares what a driver can do on this host.
type Capabilities struct {
	Name     string `json:"name"`      // "qemu"
	Accel    Accel  `json:"accel"`     // chosen once, at New
	LiveFork bool   `json:"live_fork"` // fork a running VM with copy-on-write memory
	Suspend  bool   `json:"suspend"`   // save a VM to disk and resume it later
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
	BaseDisk   string `json:"base_disk"` // read-only qcow2 image the VM's overlay is backed by
	DiskMiB    int    `json:"disk_mib"`
	MemoryMiB  int    `json:"memory_mib"`
	VCPUs      int    `json:"vcpus"`
	MAC        string `json:"mac"`
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
	Disk        string `json:"disk"`     // the VM's writable qcow2 overlay
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
	// DialAgent connects to the guest-agent channel of h.
	DialAgent(ctx context.Context, h *Handle) (net.Conn, error)
	// Destroy stops the VM (politely, then by force) and removes every file
	// the driver made for it. Destroying a VM that is already gone is not an error.
	Destroy(ctx context.Context, h *Handle) error
}
