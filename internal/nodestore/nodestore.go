// Package nodestore is a node agent's store.Store without a database
// (node protocol 2.3): the shared tables are read and written through the
// control plane's store calls (the Control service), which scope every
// call to this node, and the VMs' private state (handle, disks, kernel
// paths, MAC, generation) stays in the node's data dir, merged into the
// records the node reads and split from those it writes, so it never
// crosses the wire (docs/cluster.md, "Who writes what").
package nodestore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Control is the control plane's Control service as a node calls it: a
// client, or a failover over replicas (its store calls are the ones used).
type Control = nodev2connect.ControlClient

// Store is the node's store.Store.
type Store struct {
	ctl   Control
	local *Local
	log   *slog.Logger

	mu     sync.Mutex
	grants map[string]*nodev2.Grant // by sandbox id
}

var _ store.Store = (*Store)(nil)

// Retries is how often an update whose row moved on since it was read is
// read and applied again before the conflict is returned.
const Retries = 8

// New is the store of a node whose private state lives under dir (its
// data dir's "vmstate"), calling ctl.
func New(ctl Control, dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	loc, err := OpenLocal(dir)
	if err != nil {
		return nil, err
	}
	return &Store{ctl: ctl, local: loc, log: log, grants: map[string]*nodev2.Grant{}}, nil
}

// Grant keeps a grant the control plane sent with an operation: this
// node's calls about that sandbox carry it until it expires.
func (s *Store) Grant(g *nodev2.Grant) {
	if g == nil || g.SandboxId == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().Unix()
	for id, old := range s.grants {
		if old.ExpiresUnix < now {
			delete(s.grants, id)
		}
	}
	s.grants[g.SandboxId] = g
}

func (s *Store) grant(id string) *nodev2.Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants[id]
}

// fromControl is an answer of the control plane as a zeish error.
func fromControl(err error) error { return nodeapi.FromWire("control plane", err) }

// noDatabase refuses what a node has no business doing.
func noDatabase(what string) error {
	return fmt.Errorf("%s is the control plane's: a node agent of protocol 2.3 has no database: %w", what, errdefs.ErrUnavailable)
}

func (s *Store) read(m *nodev2.StoredSandbox) (*store.SandboxRecord, error) {
	r, err := nodeapi.StoredFromWire(m)
	if err != nil {
		return nil, fmt.Errorf("the control plane's answer: %v: %w", err, errdefs.ErrInternal)
	}
	s.local.merge(r)
	return r, nil
}

func (s *Store) getWire(ctx context.Context, id string) (*nodev2.StoredSandbox, error) {
	rep, err := s.ctl.GetSandbox(ctx, connect.NewRequest(&nodev2.StoreSandboxRef{SandboxId: id, Grant: s.grant(id)}))
	if err != nil {
		return nil, fromControl(err)
	}
	return rep.Msg, nil
}

func (s *Store) GetSandbox(ctx context.Context, id string) (*store.SandboxRecord, error) {
	m, err := s.getWire(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.read(m)
}

func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.SandboxRecord, error) {
	if f.After != "" || f.Limit != 0 {
		return nil, fmt.Errorf("a node lists its sandboxes whole (no After, no Limit): %w", errdefs.ErrInvalidArgument)
	}
	rep, err := s.ctl.ListSandboxes(ctx, connect.NewRequest(&nodev2.StoreListSandboxesRequest{AccountId: f.AccountID,
		States: nodeapi.StatesToWire(f.States), IncludeDestroyed: f.IncludeDestroyed}))
	if err != nil {
		return nil, fromControl(err)
	}
	out := make([]*store.SandboxRecord, 0, len(rep.Msg.Sandboxes))
	for _, m := range rep.Msg.Sandboxes {
		r, err := s.read(m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// CreateSandboxes writes the private state of rs here first (a crash
// before the rows exist leaves files nothing reads), then asks the
// control plane to insert the rows, with the grants of their ids.
func (s *Store) CreateSandboxes(ctx context.Context, rs ...*store.SandboxRecord) error {
	req := &nodev2.StoreCreateSandboxesRequest{}
	for _, r := range rs {
		req.Sandboxes = append(req.Sandboxes, nodeapi.StoredToWire(r))
		if g := s.grant(r.ID); g != nil {
			req.Grants = append(req.Grants, g)
		}
	}
	for _, r := range rs {
		if err := s.local.save(r); err != nil {
			return err
		}
	}
	if _, err := s.ctl.CreateSandboxes(ctx, connect.NewRequest(req)); err != nil {
		return fromControl(err)
	}
	return nil
}

// UpdateSandbox reads the row, applies fn and sends what it wrote with
// what it read: the control plane writes it only if the row is still what
// was read, else the read and fn run again (at most Retries times).
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*store.SandboxRecord) error) (*store.SandboxRecord, error) {
	for attempt := 0; ; attempt++ {
		read, err := s.getWire(ctx, id)
		if err != nil {
			return nil, err
		}
		r, err := s.read(read)
		if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			return nil, err
		}
		write := nodeapi.StoredToWire(r)
		write.SealedSecrets = "" // the row keeps its own
		rep, err := s.ctl.UpdateSandbox(ctx, connect.NewRequest(&nodev2.StoreUpdateSandboxRequest{Read: read, Write: write, Grant: s.grant(id)}))
		if err != nil {
			err = fromControl(err)
			if errdefs.Is(err, errdefs.ClassConflict) && attempt < Retries {
				s.log.Debug("sandbox changed under an update; reading it again", "sandbox", id, "attempt", attempt+1)
				continue
			}
			return nil, err
		}
		if err := s.local.save(r); err != nil {
			return nil, err
		}
		return s.read(rep.Msg)
	}
}

func (s *Store) SandboxByName(context.Context, string, string) (*store.SandboxRecord, error) {
	return nil, noDatabase("finding a sandbox by name")
}

func (s *Store) CountCreated(context.Context, string, time.Time) (int, error) {
	return 0, noDatabase("counting an account's creates")
}

func (s *Store) snapshot(m *nodev2.StoredSnapshot) (*store.SnapshotRecord, error) {
	sn, err := nodeapi.StoredSnapshotFromWire(m)
	if err != nil {
		return nil, fmt.Errorf("the control plane's answer: %v: %w", err, errdefs.ErrInternal)
	}
	return sn, nil
}

func (s *Store) CreateSnapshot(ctx context.Context, sn *store.SnapshotRecord, limit int) error {
	_, err := s.ctl.CreateSnapshotRecord(ctx, connect.NewRequest(&nodev2.StoreCreateSnapshotRequest{
		Snapshot: nodeapi.StoredSnapshotToWire(sn), Limit: int32(limit), Grant: s.grant(sn.SandboxID)}))
	return fromControl(err)
}

// GetSnapshot reads a snapshot of a sandbox this node may reach (the node
// does not know which sandbox: its live grants go along, the control plane
// uses the one for the snapshot's sandbox).
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	rep, err := s.ctl.GetSnapshot(ctx, connect.NewRequest(&nodev2.StoreSnapshotRef{SnapshotId: id, Grants: s.liveGrants()}))
	if err != nil {
		return nil, fromControl(err)
	}
	return s.snapshot(rep.Msg)
}

func (s *Store) liveGrants() []*nodev2.Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().Unix()
	var out []*nodev2.Grant
	for _, g := range s.grants {
		if g.ExpiresUnix >= now {
			out = append(out, g)
		}
	}
	return out
}

func (s *Store) SnapshotByName(ctx context.Context, sandboxID, name string) (*store.SnapshotRecord, error) {
	all, err := s.ListSnapshots(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	for _, sn := range all {
		if sn.Name == name {
			return sn, nil
		}
	}
	return nil, fmt.Errorf("snapshot %q of sandbox %s: %w", name, sandboxID, errdefs.ErrNotFound)
}

func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]*store.SnapshotRecord, error) {
	rep, err := s.ctl.ListSnapshots(ctx, connect.NewRequest(&nodev2.StoreSandboxRef{SandboxId: sandboxID, Grant: s.grant(sandboxID)}))
	if err != nil {
		return nil, fromControl(err)
	}
	out := make([]*store.SnapshotRecord, 0, len(rep.Msg.Snapshots))
	for _, m := range rep.Msg.Snapshots {
		sn, err := s.snapshot(m)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, nil
}

func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.ctl.DeleteSnapshotRecord(ctx, connect.NewRequest(&nodev2.StoreSnapshotRef{SnapshotId: id, Grants: s.liveGrants()}))
	return fromControl(err)
}

func (s *Store) PutTemplate(ctx context.Context, t sandbox.Template) error {
	if _, err := s.ctl.PutTemplate(ctx, connect.NewRequest(&nodev2.TemplateReply{Template: nodeapi.TemplateToWire(t)})); err != nil {
		return fromControl(err)
	}
	return s.local.saveTemplate(t)
}

func (s *Store) GetTemplate(ctx context.Context, key string) (sandbox.Template, error) {
	rep, err := s.ctl.GetTemplate(ctx, connect.NewRequest(&nodev2.StoreTemplateRef{Key: key}))
	if err != nil {
		return sandbox.Template{}, fromControl(err)
	}
	t := nodeapi.TemplateFromWire(rep.Msg.Template)
	s.local.mergeTemplate(&t)
	return t, nil
}

func (s *Store) ListTemplates(ctx context.Context) ([]sandbox.Template, error) {
	rep, err := s.ctl.ListTemplates(ctx, connect.NewRequest(&nodev2.StoreListTemplatesRequest{}))
	if err != nil {
		return nil, fromControl(err)
	}
	out := make([]sandbox.Template, 0, len(rep.Msg.Templates))
	for _, m := range rep.Msg.Templates {
		t := nodeapi.TemplateFromWire(m)
		s.local.mergeTemplate(&t)
		out = append(out, t)
	}
	return out, nil
}

func (s *Store) DeleteTemplate(ctx context.Context, key string) error {
	if _, err := s.ctl.DeleteTemplateRecord(ctx, connect.NewRequest(&nodev2.StoreTemplateRef{Key: key})); err != nil {
		return fromControl(err)
	}
	return s.local.dropTemplate(key)
}

// What a node has no business doing: accounts, keys, quotas, leases and
// account secrets are the control plane's alone.

func (s *Store) CreateAccount(context.Context, store.Account) error { return noDatabase("accounts") }
func (s *Store) GetAccount(context.Context, string) (store.Account, error) {
	return store.Account{}, noDatabase("accounts")
}
func (s *Store) CreateAPIKey(context.Context, store.APIKey) error { return noDatabase("API keys") }
func (s *Store) ListAccounts(context.Context) ([]store.Account, error) {
	return nil, noDatabase("accounts")
}
func (s *Store) AccountByKeyHash(context.Context, string) (store.Account, error) {
	return store.Account{}, noDatabase("API keys")
}
func (s *Store) KeyByHash(context.Context, string) (store.APIKey, error) {
	return store.APIKey{}, noDatabase("API keys")
}

// ListAPIKeys lists the keys of an account with a sandbox here, without
// their hashes: the data plane checks a token's key is not revoked.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]store.APIKey, error) {
	rep, err := s.ctl.ListAPIKeys(ctx, connect.NewRequest(&nodev2.StoreAccountRef{AccountId: accountID}))
	if err != nil {
		return nil, fromControl(err)
	}
	out := make([]store.APIKey, 0, len(rep.Msg.Keys))
	for _, k := range rep.Msg.Keys {
		out = append(out, nodeapi.APIKeyFromWire(k))
	}
	return out, nil
}
func (s *Store) RevokeAPIKey(context.Context, string, time.Time) (store.APIKey, error) {
	return store.APIKey{}, noDatabase("API keys")
}
func (s *Store) InQuotaTx(context.Context, string, time.Time, func(store.QuotaTx) error) error {
	return noDatabase("quotas")
}
func (s *Store) TryLease(context.Context, string, string, time.Time, time.Duration) (bool, error) {
	return false, noDatabase("leases")
}
func (s *Store) ReleaseLease(context.Context, string, string) error { return noDatabase("leases") }
func (s *Store) PutAccountSecret(context.Context, store.AccountSecret) error {
	return noDatabase("account secrets")
}
func (s *Store) GetAccountSecret(context.Context, string, string) (store.AccountSecret, error) {
	return store.AccountSecret{}, noDatabase("account secrets")
}
func (s *Store) ListAccountSecrets(context.Context, string) ([]store.AccountSecret, error) {
	return nil, noDatabase("account secrets")
}
func (s *Store) DeleteAccountSecret(context.Context, string, string) error {
	return noDatabase("account secrets")
}

// Close has nothing to close: no connection is held.
func (s *Store) Close() error { return nil }
