// Package api holds the wire types of zeish's public REST API, shared by the
// server and the Go SDK. openapi.yaml beside this file is the contract they
// describe; a test keeps the two and the server's routes in step.
package api

import (
	"time"

	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// BasePath is where the control-plane API lives.
const BasePath = "/api/v1"

// DataPath is where the data plane (exec, files, processes) lives.
const DataPath = "/data/v1"

// ErrorBody is the envelope of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names the stable code and says what went wrong.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID is the id of the request that failed (also the
	// X-Request-Id header); the server's log has the detail under it.
	RequestID string `json:"request_id,omitempty"`
}

// Health is GET /healthz.
type Health struct {
	Status  string `json:"status"` // "ok"
	Version string `json:"version"`
	Accel   string `json:"accel"` // "kvm" or "tcg"
	// AccelReason says why (the probe's verdict: "no /dev/kvm", "probe
	// booted the guest kernel under KVM", …); AccelProbeMS is what the probe
	// took at this start (0 when skipped or cached).
	AccelReason  string `json:"accel_reason"`
	AccelProbeMS int64  `json:"accel_probe_ms"`
	VMM          string `json:"vmm"` // "qemu"
}

// CreateSandboxRequest is POST /public/sandboxes.
type CreateSandboxRequest struct {
	Template      string            `json:"template,omitempty"` // default "base"
	Name          string            `json:"name,omitempty"`
	Size          string            `json:"size,omitempty"` // small (default), medium, large
	VCPUs         int               `json:"vcpus,omitempty"`
	MemoryMiB     int               `json:"memory_mib,omitempty"`
	DiskMiB       int               `json:"disk_mib,omitempty"`
	Region        string            `json:"region,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Secrets       map[string]string `json:"secrets,omitempty"`
	GitRepo       string            `json:"git_repo,omitempty"`
	GitBranch     string            `json:"git_branch,omitempty"`
	PRNumber      int               `json:"pr_number,omitempty"`
	MaxCostMicros int64             `json:"max_cost_micros,omitempty"`
	Browser       bool              `json:"browser,omitempty"`
	Desktop       bool              `json:"desktop,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Network       *NetworkRequest   `json:"network,omitempty"`
	// TimeoutSeconds > 0 ends the sandbox's life that long after create
	// (extend it with POST /public/sandboxes/{id}/timeout); OnTimeout is what
	// then happens: delete (default), pause or stop.
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
	OnTimeout      string `json:"on_timeout,omitempty"`

	// GitPath, GitPRRef and GitTokenSecret go with GitRepo (docs/git.md):
	// where it is cloned (default /home/user/workspace), the pull ref
	// pattern (default refs/pull/{n}/head), and the entry of Secrets
	// holding git's token (default GIT_TOKEN, when present).
	GitPath        string `json:"git_path,omitempty"`
	GitPRRef       string `json:"git_pr_ref,omitempty"`
	GitTokenSecret string `json:"git_token_secret,omitempty"`

	// Accel (kvm or tcg) and NodeLabels restrict the nodes the sandbox may
	// be placed on: the node's CPU virtualisation, and labels it must carry
	// with these values (ZEISH_NODE_LABELS). No such node: 409 node_full.
	Accel      string            `json:"accel,omitempty"`
	NodeLabels map[string]string `json:"node_labels,omitempty"`
}

// SandboxList is GET /public/sandboxes.
type SandboxList struct {
	Sandboxes []sandbox.Sandbox `json:"sandboxes"`
	// NextAfter, on a page that is full (limit reached), is the after= of
	// the next page.
	NextAfter string `json:"next_after,omitempty"`
}

// MaxListLimit bounds a page of GET /public/sandboxes.
const MaxListLimit = 1000

// WaitRequest is POST /public/sandboxes/{id}/wait: block until the sandbox
// settles (is in no transition), or reaches State if given.
type WaitRequest struct {
	State          sandbox.State `json:"state,omitempty"`
	TimeoutSeconds int           `json:"timeout_seconds,omitempty"` // default 120, at most 600
}

// AccessRequest is POST /public/sandboxes/{id}/access.
type AccessRequest struct {
	TTLSeconds int `json:"ttl_seconds,omitempty"` // default 900, at most 3600
}

// Access is a short-lived data-plane credential for one sandbox.
type Access struct {
	URL       string    `json:"url"` // base of the data plane for this sandbox
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ExecRequest is POST {access.url}/exec.
type ExecRequest struct {
	Argv           []string          `json:"argv"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Stdin          []byte            `json:"stdin,omitempty"` // base64 in JSON
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	// User is a guest user (name, uid or user:group); "" is the template's
	// default (root unless its config says otherwise).
	User string `json:"user,omitempty"`
}

// Exec event types, one JSON object per line of the exec response.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventError  = "error"
)

// ExecEvent is one line of the exec response stream (application/x-ndjson).
type ExecEvent struct {
	Type   string            `json:"type"`
	Data   []byte            `json:"data,omitempty"`   // stdout, stderr (base64 in JSON)
	Result *guest.ExecResult `json:"result,omitempty"` // exit
	Error  *ErrorDetail      `json:"error,omitempty"`  // error
}

// FileList is GET {access.url}/files/list.
type FileList struct {
	Files []guest.FileInfo `json:"files"`
}

// MkdirRequest is POST {access.url}/files/mkdir.
type MkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// ProcessList is GET {access.url}/processes.
type ProcessList struct {
	Processes []guest.Process `json:"processes"`
}

// KillRequest is POST {access.url}/processes/{pid}/kill.
type KillRequest struct {
	Signal string `json:"signal,omitempty"` // default "KILL"
}

// CloneRequest is POST /public/sandboxes/{id}/clone (alias /fork). A field
// left out keeps the parent's value; size, region, host, git repo and env are
// always the parent's.
type CloneRequest struct {
	Name          string  `json:"name,omitempty"`  // with count > 1: children are <name>-1 … <name>-N
	Count         int     `json:"count,omitempty"` // default 1, at most MaxCloneCount
	GitBranch     *string `json:"git_branch,omitempty"`
	PRNumber      *int    `json:"pr_number,omitempty"`
	MaxCostMicros *int64  `json:"max_cost_micros,omitempty"`
	Browser       *bool   `json:"browser,omitempty"`
	Desktop       *bool   `json:"desktop,omitempty"`
	// Network replaces the parent's egress policy for the children.
	Network *NetworkRequest `json:"network,omitempty"`
	// Placement of the children in a cluster: "parent" (default: all on
	// the parent's node, or node_full) or "any" (those that do not fit
	// there start on other nodes, from the fork's image in the image
	// store).
	Placement string `json:"placement,omitempty"`
}

// Fork placements (CloneRequest.Placement).
const (
	PlacementParent = "parent"
	PlacementAny    = "any"
)

// MaxCloneCount bounds one clone call.
const MaxCloneCount = sandbox.MaxForkCount

// CloneResponse answers a clone: the children, and how long the parent was
// paused while its state was captured.
type CloneResponse struct {
	PauseMS   int64             `json:"pause_ms"`
	Sandboxes []sandbox.Sandbox `json:"sandboxes"`
}

// LineageEntry is one sandbox in a lineage.
type LineageEntry struct {
	ID        string        `json:"id"`
	Name      string        `json:"name"`
	State     sandbox.State `json:"state"`
	ParentID  string        `json:"parent_id,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
}

// Lineage is GET /public/sandboxes/{id}/lineage: ancestors from the parent up
// to the root, and every descendant (children before grandchildren; each
// names its parent, so the tree can be rebuilt).
type Lineage struct {
	Sandbox     LineageEntry   `json:"sandbox"`
	Ancestors   []LineageEntry `json:"ancestors"`
	Descendants []LineageEntry `json:"descendants"`
}

// CreateSnapshotRequest is POST /public/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	Name       string `json:"name,omitempty"`        // default snapshot-<UTC YYYYMMDD-HHMMSS>
	IncludeRAM *bool  `json:"include_ram,omitempty"` // default true; false is refused
}

// SnapshotList is GET /public/sandboxes/{id}/snapshots.
type SnapshotList struct {
	Snapshots []sandbox.Snapshot `json:"snapshots"`
}

// RestoreResponse is POST /public/snapshots/{id}/restore.
type RestoreResponse struct {
	Snapshot sandbox.Snapshot `json:"snapshot"`
	Sandbox  sandbox.Sandbox  `json:"sandbox"`
}

// Event is one server-sent event of GET /public/sandboxes/{id}/events: the
// sandbox as it is after each change ("event: state").
type Event struct {
	Type    string          `json:"type"` // "state"
	Sandbox sandbox.Sandbox `json:"sandbox"`
}

// Account owns sandboxes, snapshots and API keys.
type Account struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateAccountRequest is POST /admin/accounts.
type CreateAccountRequest struct {
	Name string `json:"name"` // 1-63 lower-case letters, digits or '-'
}

// AccountList is GET /admin/accounts.
type AccountList struct {
	Accounts []Account `json:"accounts"`
}

// APIKey is a stored key as lists show it: never the key itself.
type APIKey struct {
	ID        string     `json:"id"`
	AccountID string     `json:"account_id"`
	Prefix    string     `json:"prefix"` // the key's first characters, to recognise it
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreatedAPIKey answers POST /admin/accounts/{id}/keys: the only time the
// key is shown.
type CreatedAPIKey struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	Key       string `json:"key"`
	// E2BKey is the same key in the form E2B's SDKs accept (E2BKey).
	E2BKey    string    `json:"e2b_key"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKeyList is GET /admin/keys.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// Prices is the price table, in micro-dollars (1e-6 USD) per unit-second.
type Prices struct {
	VCPUSecond      float64 `json:"vcpu_second_micros"`
	MemoryGiBSecond float64 `json:"memory_gib_second_micros"`
	DiskGiBSecond   float64 `json:"disk_gib_second_micros"`
}

// Usage is what sandboxes used: compute while running, storage on the full
// disk size from create until delete.
type Usage struct {
	RunningSeconds   float64 `json:"running_seconds"`
	VCPUSeconds      float64 `json:"vcpu_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	DiskGiBSeconds   float64 `json:"disk_gib_seconds"`
	ComputeMicros    int64   `json:"compute_micros"`
	StorageMicros    int64   `json:"storage_micros"`
	CostMicros       int64   `json:"cost_micros"`
	// NetInBytes and NetOutBytes are what the sandbox's network card
	// received and sent over its whole life (not only the window: links
	// count totals), unpriced.
	NetInBytes  uint64 `json:"net_in_bytes"`
	NetOutBytes uint64 `json:"net_out_bytes"`
}

// SandboxUsage is one sandbox's usage in a UsageReport.
type SandboxUsage struct {
	SandboxID string        `json:"sandbox_id"`
	Name      string        `json:"name"`
	State     sandbox.State `json:"state"`
	Usage     Usage         `json:"usage"`
}

// UsageReport is GET /public/usage: the account's usage in [from, to).
type UsageReport struct {
	From      time.Time      `json:"from"`
	To        time.Time      `json:"to"`
	Prices    Prices         `json:"prices"`
	Total     Usage          `json:"total"`
	Sandboxes []SandboxUsage `json:"sandboxes"`
}

// PriceEstimate is GET /public/pricing/estimate: what `sandboxes` sandboxes
// of one size cost running for `minutes`.
type PriceEstimate struct {
	Sandboxes int    `json:"sandboxes"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	DiskMiB   int    `json:"disk_mib"`
	Minutes   int    `json:"minutes"`
	Prices    Prices `json:"prices"`
	Usage     Usage  `json:"usage"`
}
