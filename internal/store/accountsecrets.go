package store

import (
	"context"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// AccountSecret is a value an account stores once and names in requests
// (a template build's registry_secret). The API never returns Value.
type AccountSecret struct {
	AccountID string    `json:"-"`
	Name      string    `json:"name"`
	Value     string    `json:"-"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AccountSecrets keeps AccountSecrets sealed (see internal/secrets), bound
// to their account and name.
type AccountSecrets interface {
	// PutAccountSecret inserts or replaces the secret of that account and name.
	PutAccountSecret(ctx context.Context, s AccountSecret) error
	// GetAccountSecret reads one, value included; none: errdefs.ErrNotFound.
	GetAccountSecret(ctx context.Context, accountID, name string) (AccountSecret, error)
	// ListAccountSecrets lists an account's secrets by name, without values.
	ListAccountSecrets(ctx context.Context, accountID string) ([]AccountSecret, error)
	// DeleteAccountSecret removes one; none: errdefs.ErrNotFound.
	DeleteAccountSecret(ctx context.Context, accountID, name string) error
}

// accountSecretAAD binds a sealed value to its row, so a value copied onto
// another account's or name's row does not open there.
func accountSecretAAD(accountID, name string) []byte {
	return []byte("account-secret\x00" + accountID + "\x00" + name)
}

// SealAccountSecret is s's value as stored.
func (c Codec) SealAccountSecret(s AccountSecret) (string, error) {
	if c.Secrets == nil {
		return "", fmt.Errorf("secret %s: the store has no secrets key: %w", s.Name, errdefs.ErrInternal)
	}
	return c.Secrets.Seal([]byte(s.Value), accountSecretAAD(s.AccountID, s.Name)), nil
}

// OpenAccountSecret reads a stored value.
func (c Codec) OpenAccountSecret(accountID, name, sealed string) (string, error) {
	if c.Secrets == nil {
		return "", fmt.Errorf("secret %s: the store has no secrets key: %w", name, errdefs.ErrInternal)
	}
	plain, err := c.Secrets.Open(sealed, accountSecretAAD(accountID, name))
	if err != nil {
		return "", fmt.Errorf("secret %s cannot be opened with this server's key: %w", name, errdefs.ErrInternal)
	}
	return string(plain), nil
}
