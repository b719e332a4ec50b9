// Package store is zeish's persistent state: accounts, API keys, templates and
// sandboxes (with the VM handle a restarted zeishd needs to find its VMs again).
// Store is the interface; sqlite/ implements it (postgres/ will), and storetest/
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
	// SecretEnv is delivered into the guest's exec environment and never
	// returned by the API.
	SecretEnv map[string]string `json:"secret_env,omitempty"`
}

// SandboxFilter selects sandboxes in List.
type SandboxFilter struct {
	AccountID        string          // "" = every account
	States           []sandbox.State // empty = any
	IncludeDestroyed bool
}

// Store is implemented by sqlite and (later) postgres.
type Store interface {
	CreateAccount(ctx context.Context, a Account) error
	GetAccount(ctx context.Context, id string) (Account, error)
	CreateAPIKey(ctx context.Context, k APIKey) error
	// AccountByKeyHash finds the account of a live (not revoked) key.
	AccountByKeyHash(ctx context.Context, hash string) (Account, error)

	PutTemplate(ctx context.Context, t sandbox.Template) error // insert or replace by name
	GetTemplate(ctx context.Context, name string) (sandbox.Template, error)

	// CreateSandbox inserts r; a live sandbox of the same account with the same
	// name gives errdefs.ErrNameTaken.
	CreateSandbox(ctx context.Context, r *SandboxRecord) error
	GetSandbox(ctx context.Context, id string) (*SandboxRecord, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*SandboxRecord, error)
	// UpdateSandbox reads the sandbox, applies fn and writes it back in one
	// transaction; fn's error aborts the update and is returned.
	UpdateSandbox(ctx context.Context, id string, fn func(*SandboxRecord) error) (*SandboxRecord, error)

	Close() error
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
