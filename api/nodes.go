package api

import "time"

// Node is a node agent of a cluster, as the admin API shows it.
type Node struct {
	ID           string            `json:"id"`
	Region       string            `json:"region"`
	Labels       map[string]string `json:"labels"`
	URL          string            `json:"url"`
	Version      string            `json:"version,omitempty"`
	Healthy      bool              `json:"healthy"`
	Live         bool              `json:"live"` // heartbeated within ZEISH_NODE_LOST_AFTER
	Draining     bool              `json:"draining"`
	MemoryMiB    int               `json:"memory_budget_mib"`
	CommittedMiB int               `json:"memory_committed_mib"`
	ImageRAMMiB  int               `json:"image_ram_mib"`
	FreeMiB      int               `json:"memory_free_mib"` // -1: no limit
	VCPUs        int               `json:"vcpus"`
	DiskFreeMiB  int               `json:"disk_free_mib"`
	Accel        string            `json:"accel"`
	RegisteredAt time.Time         `json:"registered_at"`
	HeartbeatAt  time.Time         `json:"heartbeat_at"`
}

// NodeList is GET /admin/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
