package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// secretName is an account secret's name: what a request may name.
var secretName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// maxSecretBytes bounds one secret's value.
const maxSecretBytes = 64 << 10

func checkSecretName(name string) error {
	if !secretName.MatchString(name) {
		return invalid("secret name %q: 1 to 128 of A-Z a-z 0-9 _ . -, not starting with . or -", name)
	}
	return nil
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		writeError(w, r, err)
		return
	}
	var req api.PutSecretRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Value == "" || len(req.Value) > maxSecretBytes {
		writeError(w, r, invalid("value: 1 to %d bytes", maxSecretBytes))
		return
	}
	sec := store.AccountSecret{AccountID: accountFrom(r.Context()).ID, Name: name, Value: req.Value, UpdatedAt: time.Now().UTC()}
	if err := s.store.PutAccountSecret(r.Context(), sec); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiSecret(sec))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.ListAccountSecrets(r.Context(), accountFrom(r.Context()).ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.SecretList{Secrets: make([]api.Secret, 0, len(list))}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, apiSecret(sec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.store.DeleteAccountSecret(r.Context(), accountFrom(r.Context()).ID, name); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func apiSecret(sec store.AccountSecret) api.Secret {
	return api.Secret{Name: sec.Name, UpdatedAt: sec.UpdatedAt.Format(time.RFC3339Nano)}
}

// accountSecret reads the account's secret a request names; a name the
// account has no secret under is 400 unknown_secret.
func (s *Server) accountSecret(ctx context.Context, accountID, field, name string) (string, error) {
	if err := checkSecretName(name); err != nil {
		return "", err
	}
	sec, err := s.store.GetAccountSecret(ctx, accountID, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", fmt.Errorf("%s %q: the account has no such secret (PUT /api/v1/public/secrets/%s): %w", field, name, name, errdefs.ErrUnknownSecret)
	}
	return sec.Value, err
}
