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
	// CredentialHash is the SHA-256 of the credential the control plane
	// issued the node when it joined (empty: none, or revoked): the node
	// authenticates with it, and only as this id.
	CredentialHash string `json:"credential_hash,omitempty"`
	// JoinedAt is when it last joined (got its credential).
	JoinedAt *time.Time `json:"joined_at,omitempty"`
	// Protocol is the node protocol version agreed at its last
	// registration ("2.1"): what the control plane may ask of it.
	Protocol string `json:"protocol,omitempty"`
}

// NodeCapacity is what a node reported it can promise.
type NodeCapacity struct {
	MemoryBudgetMiB    int    `json:"memory_budget_mib"` // 0: no limit
	MemoryCommittedMiB int    `json:"memory_committed_mib"`
	ImageRAMMiB        int    `json:"image_ram_mib"`
	VCPUs              int    `json:"vcpus"`
	DiskFreeMiB        int    `json:"disk_free_mib"`
	ImageDiskMiB       int    `json:"image_disk_mib,omitempty"` // images moved to disk (cold); 0 from nodes of protocol 2.0
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

// JoinToken admits one node agent to the cluster, once, before it
// expires: the node trades it for its own credential (see
// internal/cluster). Only the hash of its secret is kept.
type JoinToken struct {
	ID   string `json:"id"`
	Hash string `json:"hash"` // SHA-256 of the token's secret
	// NodeID, when set, is the only node id the token admits; it may
	// replace that node's credential (a host that lost its data dir). A
	// token without one admits any id that holds no credential yet.
	NodeID    string     `json:"node_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at,omitempty"`
	UsedBy    string     `json:"used_by,omitempty"` // the node that joined with it
}

// NodeStore keeps node membership; sqlite and postgres implement it.
type NodeStore interface {
	// CreateJoinToken stores a new join token (an id taken: ErrNameTaken).
	CreateJoinToken(ctx context.Context, t JoinToken) error
	// JoinNode reads join token tokenID (unknown: errdefs.ErrNotFound) and
	// node nodeID (a new one starts as a zero record with its ID set),
	// applies fn to both and writes both back, in one transaction: two
	// nodes racing with one token cannot both spend it. fn's error aborts.
	JoinNode(ctx context.Context, tokenID, nodeID string, fn func(*JoinToken, *NodeRecord) error) (NodeRecord, error)
	// UpdateNode reads the node (a new one starts as a zero record with
	// its ID set), applies fn and writes it back in one transaction.
	UpdateNode(ctx context.Context, id string, fn func(*NodeRecord) error) (NodeRecord, error)
	// GetNode reads one node; unknown: errdefs.ErrNotFound.
	GetNode(ctx context.Context, id string) (NodeRecord, error)
	// ListNodes lists every node ever registered, by id.
	ListNodes(ctx context.Context) ([]NodeRecord, error)
}
