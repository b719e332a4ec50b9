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
	ID          string `json:"id"`
	Name        string `json:"name"`
	AccountID   string `json:"account_id"`
	State       State  `json:"state"`
	StateReason string `json:"state_reason,omitempty"`
	// ErrorCode and ErrorMessage say why a sandbox is in state error: a
	// stable code (see ErrorCodes) and words for humans (for a failed boot,
	// the last lines of the guest's console). Empty in any other state.
	ErrorCode    string   `json:"error_code,omitempty"`
	ErrorMessage string   `json:"error_message,omitempty"`
	Template     string   `json:"template"`
	VCPUs        int      `json:"vcpus"`
	MemoryMiB    int      `json:"memory_mib"`
	DiskMiB      int      `json:"disk_mib"`
	Region       string   `json:"region"`
	Host         string   `json:"host"`
	Hostname     string   `json:"hostname"`
	Address      string   `json:"address"`
	Network      *Network `json:"network,omitempty"`      // nil: the node runs without networking
	PublicPorts  []int    `json:"public_ports,omitempty"` // guest ports served through the data plane without a token
	Accel        string   `json:"accel,omitempty"`
	// NodeLabels are the labels its create asked its node to carry.
	NodeLabels map[string]string `json:"node_labels,omitempty"`
	ParentID   string            `json:"parent_id,omitempty"`
	// ImageDurable: a stopped sandbox's saved state is whole in the image
	// store (nil: not stopped, or no image store). Shown, never stored.
	ImageDurable  *bool             `json:"image_durable,omitempty"`
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

	// TimeoutAt, when set, is when the sandbox's time is up; OnTimeout says
	// what happens then (one of TimeoutActions). Clients move it.
	TimeoutAt *time.Time `json:"timeout_at,omitempty"`
	OnTimeout string     `json:"on_timeout,omitempty"`

	// GitPath, GitPRRef and GitTokenSecret say where the repository is
	// cloned, which ref a pull request is, and which secret holds git's
	// token (see git.go); set with git_repo only.
	GitPath        string `json:"git_path,omitempty"`
	GitPRRef       string `json:"git_pr_ref,omitempty"`
	GitTokenSecret string `json:"git_token_secret,omitempty"`
}

// What happens to a sandbox when its TimeoutAt passes.
const (
	OnTimeoutDelete = "delete"
	OnTimeoutPause  = "pause"
	OnTimeoutStop   = "stop"
)

// TimeoutActions lists the values of OnTimeout.
var TimeoutActions = []string{OnTimeoutDelete, OnTimeoutPause, OnTimeoutStop}

// Template is a kernel plus a root filesystem that sandboxes boot from:
// a built-in (base, debian) visible to every account, or one an account
// built from a container image.
type Template struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	AccountID   string        `json:"account_id,omitempty"` // "" for built-ins
	Builtin     bool          `json:"builtin"`
	State       TemplateState `json:"state"`
	StateReason string        `json:"state_reason,omitempty"`
	// ErrorCode says, for a template in error, why its build failed: one
	// of TemplateErrorCodes.
	ErrorCode string `json:"error_code,omitempty"`
	Source    string `json:"source,omitempty"` // "registry:host/repo:tag", "docker-archive:upload", …
	Digest    string `json:"digest,omitempty"` // the image's manifest digest (a docker archive's: its config's)
	// ConfigDigest is the image config's digest: with the layers it names
	// (each checked against it) it is what the build unpacked.
	ConfigDigest string `json:"config_digest,omitempty"`
	Kernel       string `json:"-"`
	Initrd       string `json:"-"`
	BaseDisk     string `json:"-"`
	KernelArgs   string `json:"-"`
	Dir          string `json:"-"` // the build folder holding the files above
	// Host is the node agent that built the template and holds its files
	// (a cluster; empty on a single zeishd and for built-ins): its
	// sandboxes are placed there.
	Host    string `json:"host,omitempty"`
	Hash    string `json:"hash"`
	DiskMiB int    `json:"disk_mib"` // size of the root filesystem in the base image
	// Exec defaults and start command, from the image config unless the
	// build request set them.
	Env        []string `json:"env,omitempty"` // KEY=VALUE
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	StartCmd   []string `json:"start_cmd,omitempty"`
	ReadyCmd   []string `json:"ready_cmd,omitempty"`
	// ReadyTimeoutSeconds bounds the wait for ReadyCmd when the template is
	// warmed (0: the default).
	ReadyTimeoutSeconds int  `json:"ready_timeout_seconds,omitempty"`
	Cold                bool `json:"cold,omitempty"`
	// VCPUs and MemoryMiB, when set, size the machine the warm image is
	// taken on (0: the default size): sandboxes of that size start warm.
	VCPUs     int `json:"vcpus,omitempty"`
	MemoryMiB int `json:"memory_mib,omitempty"`
	// Warm is the saved machine sandboxes of this template start from
	// (nil: they boot cold).
	Warm       *TemplateWarm `json:"warm,omitempty"`
	LayerBytes int64         `json:"layer_bytes,omitempty"`
	// Features is the optional software the template carries that
	// sandboxes may switch on (FeatureBrowser, FeatureDesktop).
	Features  []string  `json:"features,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TemplateWarm is a warm template's saved machine: an image taken after its
// start command ran and its ready command passed, on a machine of this size
// (sandboxes of another size boot cold).
type TemplateWarm struct {
	Image     string `json:"image"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	DiskMiB   int    `json:"disk_mib"`
	BuildMS   int64  `json:"build_ms"` // boot to saved, ready command included
}

// Key is what the store files a template under: a built-in by its name,
// an account's template by its id (names are unique per account only).
func (t Template) Key() string {
	if t.AccountID == "" {
		return t.Name
	}
	return t.ID
}

// The codes a template in state error carries in error_code. They are part
// of the API: never rename one.
const (
	// TemplateBuildTimeout: the build did not finish within
	// ZEISH_TEMPLATE_BUILD_TIMEOUT (a registry that stalls, say); it was
	// stopped and its build slot freed.
	TemplateBuildTimeout = "build_timeout"
	// TemplateBadImage: the image is unusable: not an image, a blob that
	// does not match its digest, metadata past its cap, a layer that
	// leaves the root, more than the disk holds. The reason says which.
	TemplateBadImage = "bad_image"
	// TemplateRegistryAuth: the registry refused the credentials.
	TemplateRegistryAuth = "registry_auth"
	// TemplateRegistryBlocked: the registry's address is in a range builds
	// may not reach (loopback, private, link-local; ZEISH_REGISTRY_ALLOW_RANGES).
	TemplateRegistryBlocked = "registry_blocked"
	// TemplateQuota: the image would take the account past its template
	// bytes quota (ZEISH_PLAN_TEMPLATE_MIB).
	TemplateQuota = "template_quota_reached"
	// TemplateInterrupted: zeishd restarted during the build and could
	// not resume it (its inline registry credentials are not kept).
	TemplateInterrupted = "interrupted"
	// TemplateBuildFailed: anything else; the reason says what.
	TemplateBuildFailed = "build_failed"
)

// TemplateErrorCodes lists every template error_code, for the API document
// and its test.
var TemplateErrorCodes = []string{TemplateBuildTimeout, TemplateBadImage, TemplateRegistryAuth, TemplateRegistryBlocked,
	TemplateQuota, TemplateInterrupted, TemplateBuildFailed}

// TemplateState is where a template's build is.
type TemplateState string

const (
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateError    TemplateState = "error"
	// TemplateDeleted: gone from the API; its files stay while a sandbox
	// still boots from them.
	TemplateDeleted TemplateState = "deleted"
)

// Snapshot is a sandbox's disk and memory saved at one instant, by name.
type Snapshot struct {
	ID         string    `json:"id"`
	SandboxID  string    `json:"sandbox_id"`
	AccountID  string    `json:"account_id"`
	Name       string    `json:"name"`
	CreatedAt  time.Time `json:"created_at"`
	SizeBytes  int64     `json:"size_bytes"`
	IncludeRAM bool      `json:"include_ram"`
	// Durable: the snapshot's image is whole in the image store (nil: no
	// image store). Shown, never stored.
	Durable *bool `json:"durable,omitempty"`
}

// MaxSnapshots is how many snapshots one sandbox may keep.
const MaxSnapshots = 20
