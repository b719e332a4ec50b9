// Package sandbox holds zeish's domain types (Sandbox, Template, State, Size)
// and the rules on them: legal state transitions, size presets, id and name
// formats. It does no I/O; the API serialises these types as they are.
package sandbox

import (
	"time"
)

// State is where a sandbox is in its lifecycle.
type State string

const (
	StateStarting  State = "starting"
	StateRunning   State = "running"
	StatePaused    State = "paused"
	StateStopping  State = "stopping"
	StateStopped   State = "stopped"
	StateDeleting  State = "deleting"
	StateDestroyed State = "destroyed"
	StateError     State = "error"
)

// Settled reports whether s is not a transition in progress: a waiter stops here.
func (s State) Settled() bool {
	switch s {
	case StateStarting, StateStopping, StateDeleting:
		return false
	}
	return true
}

// Sandbox is one isolated machine, as the API shows it.
type Sandbox struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	AccountID     string            `json:"account_id"`
	State         State             `json:"state"`
	StateReason   string            `json:"state_reason,omitempty"`
	Template      string            `json:"template"`
	VCPUs         int               `json:"vcpus"`
	MemoryMiB     int               `json:"memory_mib"`
	DiskMiB       int               `json:"disk_mib"`
	Region        string            `json:"region"`
	Host          string            `json:"host"`
	Hostname      string            `json:"hostname"`
	Address       string            `json:"address"`
	Network       *Network          `json:"network,omitempty"`      // nil: the node runs without networking
	PublicPorts   []int             `json:"public_ports,omitempty"` // guest ports served through the data plane without a token
	Accel         string            `json:"accel,omitempty"`
	ParentID      string            `json:"parent_id,omitempty"`
	Env           map[string]string `json:"env"`
	GitRepo       string            `json:"git_repo,omitempty"`
	GitBranch     string            `json:"git_branch,omitempty"`
	PRNumber      int               `json:"pr_number,omitempty"`
	MaxCostMicros int64             `json:"max_cost_micros,omitempty"`
	Browser       bool              `json:"browser"`
	Desktop       bool              `json:"desktop"`
	Metadata      map[string]string `json:"metadata"`
	CostMicros    int64             `json:"cost_micros"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	DestroyedAt   *time.Time        `json:"destroyed_at,omitempty"`
}

// Template is a kernel plus a root filesystem that sandboxes boot from.
type Template struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Kernel     string    `json:"-"`
	Initrd     string    `json:"-"`
	BaseDisk   string    `json:"-"`
	KernelArgs string    `json:"-"`
	Hash       string    `json:"hash"`
	DiskMiB    int       `json:"disk_mib"` // size of the root filesystem in the base image
	CreatedAt  time.Time `json:"created_at"`
}

// Snapshot is a sandbox's disk and memory saved at one instant, by name.
type Snapshot struct {
	ID         string    `json:"id"`
	SandboxID  string    `json:"sandbox_id"`
	AccountID  string    `json:"account_id"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"created_at"`
	SizeBytes  int64     `json:"size_bytes"`
	IncludeRAM bool      `json:"include_ram"`
}

// MaxSnapshots is how many snapshots one sandbox may keep.
const MaxSnapshots = 20
