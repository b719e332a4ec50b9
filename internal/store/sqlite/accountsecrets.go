package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// PutAccountSecret inserts or replaces s, sealed.
func (s *Store) PutAccountSecret(ctx context.Context, sec store.AccountSecret) error {
	sealed, err := s.codec.SealAccountSecret(sec)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO account_secrets (account_id, name, sealed, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT(account_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		sec.AccountID, sec.Name, sealed, sec.UpdatedAt.UTC().Format(timeFormat))
	return err
}

// GetAccountSecret reads and opens one secret.
func (s *Store) GetAccountSecret(ctx context.Context, accountID, name string) (store.AccountSecret, error) {
	var sealed, at string
	err := s.db.QueryRowContext(ctx, `SELECT sealed, updated_at FROM account_secrets WHERE account_id = ? AND name = ?`,
		accountID, name).Scan(&sealed, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return store.AccountSecret{}, fmt.Errorf("secret %q not found: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.AccountSecret{}, err
	}
	value, err := s.codec.OpenAccountSecret(accountID, name, sealed)
	if err != nil {
		return store.AccountSecret{}, err
	}
	t, _ := time.Parse(timeFormat, at)
	return store.AccountSecret{AccountID: accountID, Name: name, Value: value, UpdatedAt: t}, nil
}

// ListAccountSecrets lists names and times, never values.
func (s *Store) ListAccountSecrets(ctx context.Context, accountID string) ([]store.AccountSecret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, updated_at FROM account_secrets WHERE account_id = ? ORDER BY name`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.AccountSecret{}
	for rows.Next() {
		var name, at string
		if err := rows.Scan(&name, &at); err != nil {
			return nil, err
		}
		t, _ := time.Parse(timeFormat, at)
		out = append(out, store.AccountSecret{AccountID: accountID, Name: name, UpdatedAt: t})
	}
	return out, rows.Err()
}

// DeleteAccountSecret removes one secret.
func (s *Store) DeleteAccountSecret(ctx context.Context, accountID, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM account_secrets WHERE account_id = ? AND name = ?`, accountID, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %q not found: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
