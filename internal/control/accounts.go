package control

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Caller is who makes a call: an account, and the API key it came with
// (the key a data-plane token is issued to). Front ends get one from
// Authenticate and pass it to every call.
type Caller struct {
	Account api.Account
	keyID   string // "" until keyOf looks it up by keyHash
	keyHash string
}

// AdminKeyFile is where the first admin API key is written, mode 0600.
const AdminKeyFile = "admin.key"

const keyPrefix = "zk_"

// IsAPIKey reports whether key has the form of a zeish API key.
func IsAPIKey(key string) bool { return strings.HasPrefix(key, keyPrefix) }

// NewAPIKey returns a fresh key and its stored hash.
func NewAPIKey() (key, hash string) {
	b := make([]byte, 24)
	rand.Read(b)
	key = keyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, HashKey(key)
}

// HashKey is how keys are stored: never in the clear. A key's E2B form
// (api.E2BKey) hashes as the key it spells.
func HashKey(key string) string {
	if zk, ok := api.ZeishKey(key); ok {
		key = zk
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func accountView(a store.Account) api.Account {
	return api.Account{ID: a.ID, Name: a.Name, Admin: a.Admin, CreatedAt: a.CreatedAt}
}

func keyView(k store.APIKey) api.APIKey {
	return api.APIKey{ID: k.ID, AccountID: k.AccountID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// Authenticate checks an API key and returns its caller.
func (c *Control) Authenticate(ctx context.Context, key string) (Caller, error) {
	return c.AuthenticateHash(ctx, HashKey(key))
}

// AuthenticateHash is Authenticate for a key known by its hash (a console
// session keeps only that).
func (c *Control) AuthenticateHash(ctx context.Context, hash string) (Caller, error) {
	a, err := c.store.AccountByKeyHash(ctx, hash)
	if err != nil {
		return Caller{}, storeErr(err)
	}
	return Caller{Account: accountView(a), keyHash: hash}, nil
}

// KeyID is the id of the API key the caller came with.
func (c *Control) KeyID(ctx context.Context, who Caller) (string, error) {
	if who.keyID != "" || who.keyHash == "" {
		return who.keyID, nil
	}
	k, err := c.store.KeyByHash(ctx, who.keyHash)
	if err != nil {
		return "", err
	}
	return k.ID, nil
}

// WithKey is who once its API key is looked up, for a caller that makes
// many calls (a console session).
func (c *Control) WithKey(ctx context.Context, who Caller) (Caller, error) {
	id, err := c.KeyID(ctx, who)
	who.keyID = id
	return who, err
}

// EnsureAdmin makes sure the admin account exists and that the key in
// <dataDir>/admin.key (created on first start) opens it.
func EnsureAdmin(ctx context.Context, s store.Store, dataDir string) (keyPath string, err error) {
	keyPath = filepath.Join(dataDir, AdminKeyFile)
	key, err := readKeyFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		key, _ = NewAPIKey()
		if err := os.WriteFile(keyPath, []byte(key+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write admin key: %w", err)
		}
	} else if err != nil {
		return "", err
	}
	const adminID = sandbox.PrefixAccount + "admin"
	if _, err := s.GetAccount(ctx, adminID); errors.Is(err, errdefs.ErrNotFound) {
		if err := s.CreateAccount(ctx, store.Account{ID: adminID, Name: "admin", Admin: true, CreatedAt: time.Now().UTC()}); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	_, err = s.AccountByKeyHash(ctx, HashKey(key))
	if errors.Is(err, errdefs.ErrUnauthenticated) {
		// Not live: new, or revoked. A revoked key stays revoked (adding it
		// again would break the store's unique hash, and undo the
		// revocation): admin.key gets a fresh key in its place.
		revoked, lerr := keyRevoked(ctx, s, HashKey(key))
		if lerr != nil {
			return "", lerr
		}
		if revoked {
			key, _ = NewAPIKey()
			if err := datadir.WriteFile(keyPath, []byte(key+"\n")); err != nil {
				return "", fmt.Errorf("replace revoked admin key: %w", err)
			}
			slog.Warn("the key in admin.key was revoked; wrote a new admin key there", "path", keyPath)
		}
		err = s.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: adminID,
			Hash: HashKey(key), Prefix: key[:8], CreatedAt: time.Now().UTC()})
		if err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	return keyPath, nil
}

// keyRevoked reports whether a key with this hash exists (and so, not being
// live, was revoked).
func keyRevoked(ctx context.Context, s store.Store, hash string) (bool, error) {
	keys, err := s.ListAPIKeys(ctx, "")
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k.Hash == hash {
			return true, nil
		}
	}
	return false, nil
}

func readKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(string(b))
	if !IsAPIKey(key) {
		return "", fmt.Errorf("%s does not hold a zeish key", path)
	}
	return key, nil
}

// The admin API: accounts, their keys and the cluster's nodes, for admin
// accounts only.

func (c *Control) admin(who Caller, what string) error {
	if !who.Account.Admin {
		return fmt.Errorf("only an admin account may %s: %w", what, errdefs.ErrForbidden)
	}
	return nil
}

// CreateAccount makes an account.
func (c *Control) CreateAccount(ctx context.Context, who Caller, req api.CreateAccountRequest) (api.Account, error) {
	if err := c.admin(who, "create accounts"); err != nil {
		return api.Account{}, err
	}
	if err := sandbox.CheckName(req.Name); err != nil {
		return api.Account{}, err
	}
	a := store.Account{ID: sandbox.NewID(sandbox.PrefixAccount), Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := c.store.CreateAccount(ctx, a); err != nil {
		return api.Account{}, err
	}
	c.log.Info("account created", "account", a.ID, "name", a.Name)
	return accountView(a), nil
}

// Accounts lists every account.
func (c *Control) Accounts(ctx context.Context, who Caller) (api.AccountList, error) {
	if err := c.admin(who, "list accounts"); err != nil {
		return api.AccountList{}, err
	}
	list, err := c.store.ListAccounts(ctx)
	if err != nil {
		return api.AccountList{}, err
	}
	out := api.AccountList{Accounts: []api.Account{}}
	for _, a := range list {
		out.Accounts = append(out.Accounts, accountView(a))
	}
	return out, nil
}

// knownAccount checks an account id from the path or the query: well formed
// and an existing account. The admin account's id ("acc_admin") predates
// random ids, so it is allowed as is.
func (c *Control) knownAccount(ctx context.Context, id string) error {
	if id != sandbox.PrefixAccount+"admin" {
		if err := sandbox.CheckID(sandbox.PrefixAccount, id); err != nil {
			return err
		}
	}
	_, err := c.store.GetAccount(ctx, id)
	return err
}

// CreateKey makes an API key of account accountID; the key itself is in
// the answer only.
func (c *Control) CreateKey(ctx context.Context, who Caller, accountID string) (api.CreatedAPIKey, error) {
	if err := c.admin(who, "create keys"); err != nil {
		return api.CreatedAPIKey{}, err
	}
	if err := c.knownAccount(ctx, accountID); err != nil {
		return api.CreatedAPIKey{}, err
	}
	key, hash := NewAPIKey()
	k := store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: accountID, Hash: hash, Prefix: key[:8], CreatedAt: time.Now().UTC()}
	if err := c.store.CreateAPIKey(ctx, k); err != nil {
		return api.CreatedAPIKey{}, err
	}
	c.log.Info("API key created", "account", accountID, "key_id", k.ID)
	e2bKey, err := api.E2BKey(key)
	if err != nil {
		return api.CreatedAPIKey{}, err
	}
	return api.CreatedAPIKey{ID: k.ID, AccountID: accountID, Key: key, E2BKey: e2bKey, Prefix: k.Prefix, CreatedAt: k.CreatedAt}, nil
}

// Keys lists the API keys of account accountID ("": of every account).
func (c *Control) Keys(ctx context.Context, who Caller, accountID string) (api.APIKeyList, error) {
	if err := c.admin(who, "list keys"); err != nil {
		return api.APIKeyList{}, err
	}
	if accountID != "" {
		if err := c.knownAccount(ctx, accountID); err != nil {
			return api.APIKeyList{}, err
		}
	}
	list, err := c.store.ListAPIKeys(ctx, accountID)
	if err != nil {
		return api.APIKeyList{}, err
	}
	out := api.APIKeyList{Keys: []api.APIKey{}}
	for _, k := range list {
		out.Keys = append(out.Keys, keyView(k))
	}
	return out, nil
}

// RevokeKey revokes key id: its tokens and console sessions end with it.
// The caller's own key is refused: revoking it would lock the caller out,
// and zeishd's own admin.key with it.
func (c *Control) RevokeKey(ctx context.Context, who Caller, id string) (api.APIKey, error) {
	if err := c.admin(who, "revoke keys"); err != nil {
		return api.APIKey{}, err
	}
	if err := sandbox.CheckID(sandbox.PrefixKey, id); err != nil {
		return api.APIKey{}, err
	}
	if own, err := c.KeyID(ctx, who); err == nil && own == id {
		return api.APIKey{}, fmt.Errorf("key %s is the one this request uses; revoke it with another admin key: %w", id, errdefs.ErrInvalidState)
	}
	k, err := c.store.RevokeAPIKey(ctx, id, time.Now().UTC())
	if err != nil {
		return api.APIKey{}, err
	}
	c.log.Info("API key revoked", "account", k.AccountID, "key_id", k.ID)
	return keyView(k), nil
}

// Cluster is what the admin API needs of a control plane with node agents
// (the cluster package's Router); nil on a single zeishd.
type Cluster interface {
	// Nodes lists the registered nodes, memory committed as the store has it.
	Nodes(ctx context.Context) ([]store.NodeRecord, error)
	// Live reports whether n heartbeated recently enough.
	Live(n store.NodeRecord) bool
	// Drain sets whether node id takes new sandboxes.
	Drain(ctx context.Context, id string, drain bool) (store.NodeRecord, error)
}

func (c *Control) nodeView(n store.NodeRecord) api.Node {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	cp := n.Capacity
	return api.Node{ID: n.ID, Region: n.Region, Labels: labels, URL: n.URL, Version: n.Version, Healthy: n.Healthy,
		Live: c.cluster.Live(n), Draining: n.Draining, MemoryMiB: cp.MemoryBudgetMiB, CommittedMiB: cp.MemoryCommittedMiB,
		ImageRAMMiB: cp.ImageRAMMiB, FreeMiB: cp.FreeMiB(), VCPUs: cp.VCPUs, DiskFreeMiB: cp.DiskFreeMiB, Accel: cp.Accel,
		RegisteredAt: n.RegisteredAt, HeartbeatAt: n.HeartbeatAt}
}

func (c *Control) noCluster() error {
	return fmt.Errorf("this zeishd runs its sandboxes itself; it has no node agents: %w", errdefs.ErrNotFound)
}

// Nodes lists the cluster's node agents.
func (c *Control) Nodes(ctx context.Context, who Caller) (api.NodeList, error) {
	if err := c.admin(who, "list nodes"); err != nil {
		return api.NodeList{}, err
	}
	if c.cluster == nil {
		return api.NodeList{}, c.noCluster()
	}
	nodes, err := c.cluster.Nodes(ctx)
	if err != nil {
		return api.NodeList{}, storeErr(err)
	}
	out := api.NodeList{Nodes: []api.Node{}}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, c.nodeView(n))
	}
	return out, nil
}

// Drain stops (drain) or resumes (undrain) placements on node id; its
// sandboxes keep running either way.
func (c *Control) Drain(ctx context.Context, who Caller, id string, drain bool) (api.Node, error) {
	if err := c.admin(who, "drain nodes"); err != nil {
		return api.Node{}, err
	}
	if c.cluster == nil {
		return api.Node{}, c.noCluster()
	}
	n, err := c.cluster.Drain(ctx, id, drain)
	if err != nil {
		return api.Node{}, storeErr(err)
	}
	c.log.Info("node drain", "node", n.ID, "draining", drain)
	return c.nodeView(n), nil
}

// storeErr classifies an error of the store for a client: one the store
// gave a class (not_found, name_taken, …) keeps it; any other is the store
// failing (an outage, a lost connection), which a client may retry:
// unavailable, never a 401 or 404 made of it.
func storeErr(err error) error {
	var e *errdefs.Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
}
