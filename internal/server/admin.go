package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// withAdmin is withAccount for the admin API: other accounts get 403.
func (s *Server) withAdmin(h http.HandlerFunc) http.HandlerFunc {
	return s.withAccount(func(w http.ResponseWriter, r *http.Request) {
		if !accountFrom(r.Context()).Admin {
			writeError(w, r, fmt.Errorf("only an admin account may use %s: %w", r.URL.Path, errdefs.ErrForbidden))
			return
		}
		h(w, r)
	})
}

func accountView(a store.Account) api.Account {
	return api.Account{ID: a.ID, Name: a.Name, Admin: a.Admin, CreatedAt: a.CreatedAt}
}

func keyView(k store.APIKey) api.APIKey {
	return api.APIKey{ID: k.ID, AccountID: k.AccountID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) {
	var req api.CreateAccountRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if err := sandbox.CheckName(req.Name); err != nil {
		writeError(w, r, err)
		return
	}
	a := store.Account{ID: sandbox.NewID(sandbox.PrefixAccount), Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateAccount(r.Context(), a); err != nil {
		writeError(w, r, err)
		return
	}
	s.log.Info("account created", "account", a.ID, "name", a.Name)
	writeJSON(w, http.StatusCreated, accountView(a))
}

func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListAccounts(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.AccountList{Accounts: []api.Account{}}
	for _, a := range list {
		out.Accounts = append(out.Accounts, accountView(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// knownAccount checks an account id from the path or the query: well formed
// and an existing account. The admin account's id ("acc_admin") predates
// random ids, so it is allowed as is.
func (s *Server) knownAccount(ctx context.Context, id string) error {
	if id != sandbox.PrefixAccount+"admin" {
		if err := sandbox.CheckID(sandbox.PrefixAccount, id); err != nil {
			return err
		}
	}
	_, err := s.store.GetAccount(ctx, id)
	return err
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	if err := decode(r, &struct{}{}); err != nil {
		writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if err := s.knownAccount(r.Context(), id); err != nil {
		writeError(w, r, err)
		return
	}
	key, hash := NewAPIKey()
	k := store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: id, Hash: hash, Prefix: key[:8], CreatedAt: time.Now().UTC()}
	if err := s.store.CreateAPIKey(r.Context(), k); err != nil {
		writeError(w, r, err)
		return
	}
	s.log.Info("API key created", "account", id, "key_id", k.ID)
	e2bKey, err := api.E2BKey(key)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.CreatedAPIKey{ID: k.ID, AccountID: id, Key: key, E2BKey: e2bKey, Prefix: k.Prefix, CreatedAt: k.CreatedAt})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("account")
	if id != "" {
		if err := s.knownAccount(r.Context(), id); err != nil {
			writeError(w, r, err)
			return
		}
	}
	list, err := s.store.ListAPIKeys(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.APIKeyList{Keys: []api.APIKey{}}
	for _, k := range list {
		out.Keys = append(out.Keys, keyView(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := sandbox.CheckID(sandbox.PrefixKey, id); err != nil {
		writeError(w, r, err)
		return
	}
	// Revoking the key in use would lock the caller out, and zeishd's own
	// admin.key with it.
	tok, _ := bearer(r)
	if cur, err := s.store.KeyByHash(r.Context(), HashKey(tok)); err == nil && cur.ID == id {
		writeError(w, r, fmt.Errorf("key %s is the one this request uses; revoke it with another admin key: %w", id, errdefs.ErrInvalidState))
		return
	}
	k, err := s.store.RevokeAPIKey(r.Context(), id, time.Now().UTC())
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.log.Info("API key revoked", "account", k.AccountID, "key_id", k.ID)
	writeJSON(w, http.StatusOK, keyView(k))
}
