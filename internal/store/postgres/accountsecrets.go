package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// PutAccountSecret inserts or replaces s, sealed.
func (s *Store) PutAccountSecret(ctx context.Context, sec store.AccountSecret) error {
	sealed, err := s.codec.SealAccountSecret(sec)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO account_secrets (account_id, name, sealed, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (account_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		sec.AccountID, sec.Name, sealed, sec.UpdatedAt.UTC())
	return err
}

// GetAccountSecret reads and opens one secret.
func (s *Store) GetAccountSecret(ctx context.Context, accountID, name string) (store.AccountSecret, error) {
	var sealed string
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT sealed, updated_at FROM account_secrets WHERE account_id = $1 AND name = $2`,
		accountID, name).Scan(&sealed, &at)
	if err != nil {
		return store.AccountSecret{}, notFound("secret", name, err)
	}
	value, err := s.codec.OpenAccountSecret(accountID, name, sealed)
	if err != nil {
		return store.AccountSecret{}, err
	}
	return store.AccountSecret{AccountID: accountID, Name: name, Value: value, UpdatedAt: at.UTC()}, nil
}

// ListAccountSecrets lists names and times, never values.
func (s *Store) ListAccountSecrets(ctx context.Context, accountID string) ([]store.AccountSecret, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, updated_at FROM account_secrets WHERE account_id = $1 ORDER BY name`, accountID)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AccountSecret, error) {
		sec := store.AccountSecret{AccountID: accountID}
		err := r.Scan(&sec.Name, &sec.UpdatedAt)
		sec.UpdatedAt = sec.UpdatedAt.UTC()
		return sec, err
	})
	if out == nil && err == nil {
		out = []store.AccountSecret{}
	}
	return out, err
}

// DeleteAccountSecret removes one secret.
func (s *Store) DeleteAccountSecret(ctx context.Context, accountID, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM account_secrets WHERE account_id = $1 AND name = $2`, accountID, name)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("secret %q not found: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
