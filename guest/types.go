// Package guest is the contract between zeish and sandboxd, the agent inside
// every guest: the wire protocol over the single virtio-serial channel, the
// agent's server side and the host's client.
package guest

import (
	"time"

	"github.com/zeish/zeish/guest/desktop"
)

// ExecRequest starts a process in the guest.
type ExecRequest struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // 0: no limit
	// User runs the process as a user of the guest's /etc/passwd: a name,
	// a uid, or user:group; "" is Config.User (else root).
	User string `json:"user,omitempty"`
}

// ExecResult is how a process ended.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"` // -1 if killed by a signal
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out"`
	PID        int    `json:"pid"`
	DurationMS int64  `json:"duration_ms"`
}

// FileInfo describes one file in the guest.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // like "-rw-r--r--"
	Perm    uint32    `json:"perm"` // permission bits, e.g. 0644
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
	Symlink string    `json:"symlink,omitempty"`
	// Owner and Group name the file's owner and group, as the guest's
	// /etc/passwd and /etc/group do (the number when they have no name).
	// Empty from an agent older than them.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Target is where a symbolic link finally leads (nil for anything
	// else, and from an agent older than it).
	Target *LinkTarget `json:"target,omitempty"`
	// Metadata is the file's user metadata (its MetadataXattrPrefix
	// extended attributes), read only when a call asks for it.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// LinkTarget is what a symbolic link resolves to, every link on the way
// followed.
type LinkTarget struct {
	// Path is absolute; "" when the link cannot be resolved (it dangles, or
	// loops).
	Path string `json:"path"`
	// Mode and Perm describe what is there (as FileInfo's do); empty when
	// Path is.
	Mode string `json:"mode,omitempty"`
	Perm uint32 `json:"perm,omitempty"`
}

// SystemStats is the guest's use of its CPUs, memory and root disk at one
// instant. CPU time is cumulative since boot: a rate needs two of them.
type SystemStats struct {
	Time     time.Time `json:"time"`
	CPUCount int       `json:"cpu_count"`
	// CPUBusy and CPUTotal are clock ticks (of every CPU together) spent
	// busy and in all, from /proc/stat.
	CPUBusy  uint64 `json:"cpu_busy"`
	CPUTotal uint64 `json:"cpu_total"`
	// Memory in bytes, from /proc/meminfo.
	MemTotal     uint64 `json:"mem_total"`
	MemFree      uint64 `json:"mem_free"`
	MemAvailable uint64 `json:"mem_available"`
	MemBuffers   uint64 `json:"mem_buffers"`
	MemCached    uint64 `json:"mem_cached"`
	// The root filesystem in bytes: its size and what is left for users.
	DiskTotal     uint64 `json:"disk_total"`
	DiskAvailable uint64 `json:"disk_available"`
}

// Process is one entry of the guest's process list.
type Process struct {
	PID     int      `json:"pid"`
	PPID    int      `json:"ppid"`
	Command string   `json:"command"`
	Argv    []string `json:"argv"`
}

// Config is what the host tells the guest after every boot, fork and restore,
// before the sandbox is reported running.
type Config struct {
	Hostname string            `json:"hostname"`
	Time     time.Time         `json:"time"`    // the host's clock now
	Entropy  []byte            `json:"entropy"` // fresh random bytes to reseed the kernel RNG
	Env      map[string]string `json:"env"`     // default environment of every exec (vars and secrets)
	Network  *Network          `json:"network,omitempty"`
	// User and Cwd are the exec defaults of the template (an image's User
	// and WorkingDir); empty: root, and the user's home.
	User string `json:"user,omitempty"`
	Cwd  string `json:"cwd,omitempty"`
	// StartCmd is started once per boot, in the background, as User in Cwd
	// with Env (a template's start command); output goes to
	// /run/zeish/start.log.
	StartCmd []string `json:"start_cmd,omitempty"`
	// Desktop, when set, runs an X server and a window manager (started
	// before Configure returns, kept across forks and restores, stopped
	// when a later Configure has none) and sets DISPLAY in Env.
	Desktop *desktop.Config `json:"desktop,omitempty"`
	// Git, when set, is the credential sandboxd hands git's credential
	// helper (gitcred.go), kept in the agent's memory only; nil forgets it.
	Git *GitAuth `json:"git,omitempty"`
}

// GitAuth is one credential for git over HTTP: answered only for requests
// to Protocol://Host, and only to User's processes (and root's).
type GitAuth struct {
	Protocol string `json:"protocol"` // "https" or "http"
	Host     string `json:"host"`     // "github.com", "198.18.0.1:8080"
	Username string `json:"username"`
	Password string `json:"password"`
	User     string `json:"user"` // the guest account git runs as
}

// Network is the guest's network identity.
type Network struct {
	Interface string `json:"interface"` // "eth0"
	MAC       string `json:"mac"`
	Address   string `json:"address"` // CIDR, "10.0.2.15/24"
	Gateway   string `json:"gateway,omitempty"`
	// DNS, when set, replaces the nameservers of /etc/resolv.conf.
	DNS []string `json:"dns,omitempty"`
}

// Info is what the guest reports about itself.
type Info struct {
	KernelRelease string  `json:"kernel_release"`
	Hostname      string  `json:"hostname"`
	BootID        string  `json:"boot_id"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	AgentVersion  string  `json:"agent_version"`
}
