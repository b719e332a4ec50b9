// Package store is zeish's persistent state: accounts, API keys, templates and
// sandboxes (with the VM handle a restarted zeishd needs to find its VMs again).
// Store is the interface; sqlite/ and postgres/ implement it, and storetest/
// is the conformance suite every implementation runs.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// Account owns sandboxes, snapshots and templates.
type Account struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey is a stored key: only its hash is kept.
type APIKey struct {
	ID        string     `json:"id"`
	AccountID string     `json:"account_id"`
	Hash      string     `json:"-"`
	Prefix    string     `json:"prefix"` // first characters, to recognise a key in lists
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// SandboxRecord is a sandbox plus what only the node needs.
type SandboxRecord struct {
	sandbox.Sandbox
	MAC    string          `json:"mac"`
	Handle json.RawMessage `json:"handle,omitempty"` // the driver's vmm.Handle, null when no VM exists
	// Disk is the sandbox's writable overlay; Layers are the images whose
	// frozen disks it is backed by, oldest first (they live while any
	// sandbox or snapshot needs them).
	Disk string `json:"disk,omitempty"`
	// DiskBase, when set, means Disk is still to be made: an overlay on this
	// frozen layer, created by the next start.
	DiskBase string   `json:"disk_base,omitempty"`
	Layers   []string `json:"layers,omitempty"`
	// ResumeImage is, for a stopped sandbox, the image its next start loads.
	ResumeImage string `json:"resume_image,omitempty"`
	// Kernel, Initrd and KernelArgs are what the sandbox booted with; VMs
	// that load its state later get the same command line.
	Kernel     string `json:"kernel,omitempty"`
	Initrd     string `json:"initrd,omitempty"`
	KernelArgs string `json:"kernel_args,omitempty"`
	// Pristine: the sandbox's VM was loaded paused from the image it was
	// captured into and has not run since, so it still is that image: a
	// fork or snapshot can reuse it as it is.
	Pristine bool `json:"pristine,omitempty"`
	// Gen counts the VMs the sandbox has had; each gets its own folder.
	Gen int `json:"gen"`
	// SecretEnv is delivered into the guest's exec environment and never
	// returned by the API. Stores keep it sealed (see internal/secrets), never
	// in the clear: it has no JSON form of its own.
	SecretEnv map[string]string `json:"-"`
	// Running lists the intervals the sandbox was running (billed compute),
	// the last one open while it runs. Stores keep it up to date on every
	// state change (see Meter), so usage survives a restart.
	Running []Interval `json:"running,omitempty"`
	// NetIn and NetOut are the bytes the sandbox received and sent on
	// links it no longer has (counted in when a link goes); the current
	// link's own counters come on top (node.NetBytes).
	NetIn uint64 `json:"net_in,omitempty"`
	// NetKept: a delete has folded the final link's counters into NetIn and
	// NetOut (its VM was gone first, so they no longer move); a retried
	// delete and usage must not count that link again.
	NetKept bool   `json:"net_kept,omitempty"`
	NetOut  uint64 `json:"net_out,omitempty"`
	// LostFrom is the state the sandbox was in when its node was lost
	// (error node_lost); the node's return makes it so again
	// (sandbox.RejoinOp).
	LostFrom sandbox.State `json:"lost_from,omitempty"`

	// unreadable holds, as stored, secrets this store could not open (another
	// key, a damaged row): the record still reads, and a write keeps them.
	unreadable string
}

// SecretsUnreadable reports whether the sandbox has secrets its store could
// not open and nobody handed over in the clear (SecretEnv lacks them).
func (r *SandboxRecord) SecretsUnreadable() bool { return r.unreadable != "" && len(r.SecretEnv) == 0 }

// SealedSecrets is the sealed form of r's secrets as read by a store that
// could not open them (a node agent's, which holds no secrets key).
func (r *SandboxRecord) SealedSecrets() string { return r.unreadable }

// SetSealedSecrets is what a store without the secrets key writes for r's
// secrets: their sealed form, made by the holder of the key (Codec.Seal on
// the control plane) for this sandbox's id. A store that holds the key
// seals SecretEnv itself and ignores it.
func (r *SandboxRecord) SetSealedSecrets(sealed string) { r.unreadable = sealed }

// Interval is a span of time; End is nil while it lasts.
type Interval struct {
	Start time.Time  `json:"start"`
	End   *time.Time `json:"end,omitempty"`
}

// Meter records r's current state in its running intervals: one opens when
// it runs, and closes when it stops running. Every store calls it on each write,
// so no code path that changes a state can forget billing.
func Meter(r *SandboxRecord, now time.Time) {
	is := r.State.Billed()
	open := len(r.Running) > 0 && r.Running[len(r.Running)-1].End == nil
	switch {
	case is && !open:
		r.Running = append(r.Running, Interval{Start: now})
	case !is && open:
		end := now
		r.Running[len(r.Running)-1].End = &end
	}
}

// SandboxFilter selects sandboxes in List.
type SandboxFilter struct {
	AccountID        string          // "" = every account
	States           []sandbox.State // empty = any
	IncludeDestroyed bool
	// After, a sandbox id, starts the list after that sandbox (in the
	// list's order: created_at, then id); an unknown id lists nothing.
	After string
	Limit int // at most this many; 0 = all
}

// Store is implemented by sqlite and postgres.
type Store interface {
	CreateAccount(ctx context.Context, a Account) error
	GetAccount(ctx context.Context, id string) (Account, error)
	CreateAPIKey(ctx context.Context, k APIKey) error
	ListAccounts(ctx context.Context) ([]Account, error)
	// AccountByKeyHash finds the account of a live (not revoked) key.
	AccountByKeyHash(ctx context.Context, hash string) (Account, error)
	// KeyByHash finds a live key by its hash.
	KeyByHash(ctx context.Context, hash string) (APIKey, error)
	// ListAPIKeys lists keys, revoked ones included, of one account ("" = all).
	ListAPIKeys(ctx context.Context, accountID string) ([]APIKey, error)
	// RevokeAPIKey marks a key revoked (again is fine); unknown: not_found.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) (APIKey, error)

	PutTemplate(ctx context.Context, t sandbox.Template) error // insert or replace by t.Key()
	GetTemplate(ctx context.Context, key string) (sandbox.Template, error)
	// ListTemplates lists every template of every account, deleted ones too.
	ListTemplates(ctx context.Context) ([]sandbox.Template, error)
	// DeleteTemplate removes the row under key (missing is fine).
	DeleteTemplate(ctx context.Context, key string) error

	// CreateSandboxes inserts rs, all or none (a fork of count N makes N);
	// a live sandbox of the same account with the same name gives
	// errdefs.ErrNameTaken.
	CreateSandboxes(ctx context.Context, rs ...*SandboxRecord) error
	GetSandbox(ctx context.Context, id string) (*SandboxRecord, error)
	// SandboxByName finds the account's sandbox of that name among those not
	// destroyed (names are unique there); none: errdefs.ErrNotFound.
	SandboxByName(ctx context.Context, accountID, name string) (*SandboxRecord, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*SandboxRecord, error)
	// CountCreated counts the account's sandboxes created at or after since,
	// destroyed ones included.
	CountCreated(ctx context.Context, accountID string, since time.Time) (int, error)
	// UpdateSandbox reads the sandbox, applies fn and writes it back in one
	// transaction; fn's error aborts the update and is returned.
	UpdateSandbox(ctx context.Context, id string, fn func(*SandboxRecord) error) (*SandboxRecord, error)

	// CreateSnapshot inserts s; the sandbox's limit and name uniqueness are
	// checked in the same transaction (errdefs.ErrLimitReached, ErrNameTaken).
	CreateSnapshot(ctx context.Context, s *SnapshotRecord, limit int) error
	GetSnapshot(ctx context.Context, id string) (*SnapshotRecord, error)
	// SnapshotByName finds a sandbox's snapshot by its name; none: errdefs.ErrNotFound.
	SnapshotByName(ctx context.Context, sandboxID, name string) (*SnapshotRecord, error)
	ListSnapshots(ctx context.Context, sandboxID string) ([]*SnapshotRecord, error)
	DeleteSnapshot(ctx context.Context, id string) error

	Quotas
	AccountSecrets

	Close() error
}

// SnapshotRecord is a snapshot plus the image that holds it.
type SnapshotRecord struct {
	sandbox.Snapshot
	Image string `json:"image"`
}

// VMHandle decodes the stored VM handle, nil when the sandbox has no VM.
func (r *SandboxRecord) VMHandle() (*vmm.Handle, error) {
	if len(r.Handle) == 0 || string(r.Handle) == "null" {
		return nil, nil
	}
	h := new(vmm.Handle)
	if err := json.Unmarshal(r.Handle, h); err != nil {
		return nil, fmt.Errorf("decode VM handle of %s: %w", r.ID, err)
	}
	return h, nil
}

// SetHandle stores h (nil clears it).
func (r *SandboxRecord) SetHandle(h *vmm.Handle) error {
	if h == nil {
		r.Handle = nil
		return nil
	}
	b, err := json.Marshal(h)
	r.Handle = b
	return err
}
