package control

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// Account secrets: values an account stores once and names in requests
// (a template build's registry_secret), sealed at rest, never shown again.

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

func secretView(sec store.AccountSecret) api.Secret {
	return api.Secret{Name: sec.Name, UpdatedAt: sec.UpdatedAt.Format(time.RFC3339Nano)}
}

// PutSecret stores (or replaces) the caller's secret name.
func (c *Control) PutSecret(ctx context.Context, who Caller, name string, req api.PutSecretRequest) (api.Secret, error) {
	if err := checkSecretName(name); err != nil {
		return api.Secret{}, err
	}
	if req.Value == "" || len(req.Value) > maxSecretBytes {
		return api.Secret{}, invalid("value: 1 to %d bytes", maxSecretBytes)
	}
	sec := store.AccountSecret{AccountID: who.Account.ID, Name: name, Value: req.Value, UpdatedAt: time.Now().UTC()}
	if err := c.store.PutAccountSecret(ctx, sec); err != nil {
		return api.Secret{}, err
	}
	return secretView(sec), nil
}

// CheckSecretName refuses a secret name no secret can have (before a
// request body is read).
func CheckSecretName(name string) error { return checkSecretName(name) }

// Secrets lists the caller's secrets, without their values.
func (c *Control) Secrets(ctx context.Context, who Caller) (api.SecretList, error) {
	list, err := c.store.ListAccountSecrets(ctx, who.Account.ID)
	if err != nil {
		return api.SecretList{}, err
	}
	out := api.SecretList{Secrets: make([]api.Secret, 0, len(list))}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, secretView(sec))
	}
	return out, nil
}

// DeleteSecret removes the caller's secret name.
func (c *Control) DeleteSecret(ctx context.Context, who Caller, name string) error {
	if err := checkSecretName(name); err != nil {
		return err
	}
	return c.store.DeleteAccountSecret(ctx, who.Account.ID, name)
}

// accountSecret reads the account's secret a request names; a name the
// account has no secret under is 400 unknown_secret.
func (c *Control) accountSecret(ctx context.Context, accountID, field, name string) (string, error) {
	if err := checkSecretName(name); err != nil {
		return "", err
	}
	sec, err := c.store.GetAccountSecret(ctx, accountID, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", fmt.Errorf("%s %q: the account has no such secret (PUT /api/v1/public/secrets/%s): %w", field, name, name, errdefs.ErrUnknownSecret)
	}
	return sec.Value, err
}
