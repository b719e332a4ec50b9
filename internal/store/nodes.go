package store

import (
	"context"
	"time"
)

// NodeRecord is a node agent's membership: what it registered (address,
// labels) and what its last heartbeat said (capacity, health). The
// control-plane replicas share it through the database.
type NodeRecord struct {
	ID     string            `json:"id"`
	Region string            `json:"region"`
	Labels map[string]string `json:"labels,omitempty"`
	// URL is the base of the node's Node service and of its data plane.
	URL      string       `json:"url"`
	Version  string       `json:"version,omitempty"`
	Capacity NodeCapacity `json:"capacity"`
	Healthy  bool         `json:"healthy"`
	// Draining: no new sandboxes are placed on it; those it has keep running.
	Draining     bool      `json:"draining"`
	RegisteredAt time.Time `json:"registered_at"`
	HeartbeatAt  time.Time `json:"heartbeat_at"`
}

// NodeCapacity is what a node reported it can promise.
type NodeCapacity struct {
	MemoryBudgetMiB    int    `json:"memory_budget_mib"` // 0: no limit
	MemoryCommittedMiB int    `json:"memory_committed_mib"`
	ImageRAMMiB        int    `json:"image_ram_mib"`
	VCPUs              int    `json:"vcpus"`
	DiskFreeMiB        int    `json:"disk_free_mib"`
	Accel              string `json:"accel"`
	VMM                string `json:"vmm"`
}

// FreeMiB is the guest memory the node can still promise (-1: no limit).
func (c NodeCapacity) FreeMiB() int {
	if c.MemoryBudgetMiB <= 0 {
		return -1
	}
	return max(0, c.MemoryBudgetMiB-c.MemoryCommittedMiB-c.ImageRAMMiB)
}

// NodeStore keeps node membership; sqlite and postgres implement it.
type NodeStore interface {
	// UpdateNode reads the node (a new one starts as a zero record with
	// its ID set), applies fn and writes it back in one transaction.
	UpdateNode(ctx context.Context, id string, fn func(*NodeRecord) error) (NodeRecord, error)
	// GetNode reads one node; unknown: errdefs.ErrNotFound.
	GetNode(ctx context.Context, id string) (NodeRecord, error)
	// ListNodes lists every node ever registered, by id.
	ListNodes(ctx context.Context) ([]NodeRecord, error)
}
