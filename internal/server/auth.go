package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// AdminKeyFile is where the first admin API key is written, mode 0600.
const AdminKeyFile = "admin.key"

const keyPrefix = "zk_"

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
	if !strings.HasPrefix(key, keyPrefix) {
		return "", fmt.Errorf("%s does not hold a zeish key", path)
	}
	return key, nil
}

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", fmt.Errorf("missing Authorization: Bearer header: %w", errdefs.ErrUnauthenticated)
	}
	return tok, nil
}

type ctxKey int

const accountKey ctxKey = 0

func accountFrom(ctx context.Context) store.Account {
	a, _ := ctx.Value(accountKey).(store.Account)
	return a
}

// withAccount authenticates an API key and puts its account in the context.
func (s *Server) withAccount(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(accountKey).(store.Account); ok {
			h(w, r) // a console request, authenticated by its session (console.go)
			return
		}
		key, err := bearer(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		a, err := s.store.AccountByKeyHash(r.Context(), HashKey(key))
		if err != nil {
			writeError(w, r, storeErr(err))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), accountKey, a)))
	}
}

// Data-plane tokens are "zdp_<sandbox>.<account>.<api key id>.<unix
// expiry>.<mac>": signed with a key kept in the data dir. They die with
// their expiry, with the sandbox, and with the API key that asked for them
// (the handler checks both: a revoked key's tokens stop at once).
const tokenPrefix = "zdp_"

type tokenSigner struct {
	key []byte
	// keyFor, when set, is the key of the sandboxes of node host: a
	// control plane signs each node's tokens with that node's own key
	// (internal/cluster's DataPlaneKey), so no node can mint a token
	// another node accepts.
	keyFor func(host string) []byte
}

// keyOf is the key of tokens for rec.
func (t *tokenSigner) keyOf(rec *store.SandboxRecord) []byte {
	if t.keyFor != nil {
		return t.keyFor(rec.Host)
	}
	return t.key
}

func loadTokenKey(dataDir string) (*tokenSigner, error) {
	path := filepath.Join(dataDir, "token.key")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b = make([]byte, 32)
		rand.Read(b)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write token key: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("%s is too short", path)
	}
	return &tokenSigner{key: b}, nil
}

func (t *tokenSigner) mac(payload string) string { return macWith(t.key, payload) }

func macWith(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue signs a token for sandbox rec, of its account, issued to API key keyID.
func (t *tokenSigner) issue(rec *store.SandboxRecord, keyID string, exp time.Time) string {
	payload := fmt.Sprintf("%s.%s.%s.%d", rec.ID, rec.AccountID, keyID, exp.Unix())
	return tokenPrefix + payload + "." + macWith(t.keyOf(rec), payload)
}

// verify checks a token for sandboxID and returns its account and the API
// key that asked for it.
func (t *tokenSigner) verify(token, sandboxID string, now time.Time) (accountID, keyID string, err error) {
	return t.verifyWith(t.key, token, sandboxID, now)
}

func (t *tokenSigner) verifyWith(key []byte, token, sandboxID string, now time.Time) (accountID, keyID string, err error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 5 {
		return "", "", fmt.Errorf("malformed data-plane token: %w", errdefs.ErrUnauthenticated)
	}
	payload := strings.Join(parts[:4], ".")
	if !hmac.Equal([]byte(parts[4]), []byte(macWith(key, payload))) {
		return "", "", fmt.Errorf("data-plane token signature is not valid: %w", errdefs.ErrUnauthenticated)
	}
	if parts[0] != sandboxID {
		return "", "", fmt.Errorf("this data-plane token is for another sandbox: %w", errdefs.ErrUnauthenticated)
	}
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || strconv.FormatInt(exp, 10) != parts[3] { // only as issue writes it
		return "", "", fmt.Errorf("malformed data-plane token: %w", errdefs.ErrUnauthenticated)
	}
	if now.Unix() >= exp {
		return "", "", fmt.Errorf("data-plane token expired at %s: %w", time.Unix(exp, 0).UTC().Format(time.RFC3339), errdefs.ErrTokenExpired)
	}
	return parts[1], parts[2], nil
}

// requestKey is the API key a control-plane request was made with.
func (s *Server) requestKey(r *http.Request) (store.APIKey, error) {
	if k, ok := r.Context().Value(apiKeyCtx{}).(store.APIKey); ok {
		return k, nil // a console session's key
	}
	tok, err := bearer(r)
	if err != nil {
		return store.APIKey{}, err
	}
	return s.store.KeyByHash(r.Context(), HashKey(tok))
}

// apiKeyCtx carries the API key of a request authenticated another way
// than by its bearer (a console session).
type apiKeyCtx struct{}

// checkToken verifies a data-plane token for sandboxID and that the API key
// it was issued to is still live; it returns the token's account.
func (s *Server) checkToken(ctx context.Context, token, sandboxID string) (string, error) {
	key := s.tokens.key
	if s.tokens.keyFor != nil {
		if rec, err := s.store.GetSandbox(ctx, sandboxID); err == nil {
			key = s.tokens.keyOf(rec)
		}
	}
	acct, keyID, err := s.tokens.verifyWith(key, token, sandboxID, time.Now())
	if err == nil {
		err = s.keyLive(ctx, acct, keyID)
	}
	return acct, err
}

// keyLive checks that the API key a token was issued to is not revoked.
func (s *Server) keyLive(ctx context.Context, accountID, keyID string) error {
	keys, err := s.store.ListAPIKeys(ctx, accountID)
	if err != nil {
		return storeErr(err)
	}
	for _, k := range keys {
		if k.ID == keyID && k.RevokedAt == nil {
			return nil
		}
	}
	return fmt.Errorf("the API key this data-plane token was issued to is revoked: %w", errdefs.ErrUnauthenticated)
}
