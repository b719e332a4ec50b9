package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// CreateAccount inserts a.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO accounts (id, name, admin, created_at) VALUES ($1, $2, $3, $4)`,
		a.ID, a.Name, a.Admin, a.CreatedAt.UTC())
	if uniqueViolation(err) != "" {
		return fmt.Errorf("account %q: %w", a.Name, errdefs.ErrNameTaken)
	}
	return err
}

// GetAccount reads one account.
func (s *Store) GetAccount(ctx context.Context, id string) (store.Account, error) {
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT id, name, admin, created_at FROM accounts WHERE id = $1`, id))
	if err != nil {
		return store.Account{}, notFound("account", id, err)
	}
	return a, nil
}

func scanAccount(row pgx.Row) (store.Account, error) {
	var a store.Account
	err := row.Scan(&a.ID, &a.Name, &a.Admin, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}

// ListAccounts lists every account, oldest first.
func (s *Store) ListAccounts(ctx context.Context) ([]store.Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, admin, created_at FROM accounts ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Account, error) { return scanAccount(r) })
}

// CreateAPIKey inserts k (its hash only).
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES ($1, $2, $3, $4, $5)`,
		k.ID, k.AccountID, k.Hash, k.Prefix, k.CreatedAt.UTC())
	return err
}

const keyColumns = `id, account_id, hash, prefix, created_at, revoked_at`

func scanKey(row pgx.Row) (store.APIKey, error) {
	var k store.APIKey
	var revoked *time.Time
	if err := row.Scan(&k.ID, &k.AccountID, &k.Hash, &k.Prefix, &k.CreatedAt, &revoked); err != nil {
		return k, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	if revoked != nil {
		t := revoked.UTC()
		k.RevokedAt = &t
	}
	return k, nil
}

// KeyByHash finds a live key by its hash.
func (s *Store) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return k, fmt.Errorf("unknown or revoked API key: %w", errdefs.ErrUnauthenticated)
	}
	return k, err
}

// ListAPIKeys lists the keys of one account ("" = every account), oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]store.APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE $1 = '' OR account_id = $1 ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.APIKey, error) { return scanKey(r) })
}

// RevokeAPIKey marks a key revoked; the first revocation time is kept.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, at.UTC(), id); err != nil {
		return store.APIKey{}, err
	}
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, id))
	if err != nil {
		return k, notFound("API key", id, err)
	}
	return k, nil
}

// AccountByKeyHash finds the account that owns a live key.
func (s *Store) AccountByKeyHash(ctx context.Context, hash string) (store.Account, error) {
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT a.id, a.name, a.admin, a.created_at FROM accounts a
		JOIN api_keys k ON k.account_id = a.id WHERE k.hash = $1 AND k.revoked_at IS NULL`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("unknown or revoked API key: %w", errdefs.ErrUnauthenticated)
	}
	return a, err
}

// PutTemplate inserts or replaces a template by its key (see Template.Key).
func (s *Store) PutTemplate(ctx context.Context, t sandbox.Template) error {
	data, err := store.EncodeTemplate(t)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO templates (name, data) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data`, t.Key(), data)
	return err
}

// ListTemplates returns every template, deleted ones included.
func (s *Store) ListTemplates(ctx context.Context) ([]sandbox.Template, error) {
	rows, err := s.pool.Query(ctx, `SELECT data FROM templates ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.Template, error) {
		var data string
		if err := r.Scan(&data); err != nil {
			return sandbox.Template{}, err
		}
		return store.DecodeTemplate(data)
	})
}

// DeleteTemplate removes a template's row (its files are gone).
func (s *Store) DeleteTemplate(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM templates WHERE name = $1`, key)
	return err
}

// GetTemplate reads a template by its key (see Template.Key).
func (s *Store) GetTemplate(ctx context.Context, name string) (sandbox.Template, error) {
	var data string
	if err := s.pool.QueryRow(ctx, `SELECT data FROM templates WHERE name = $1`, name).Scan(&data); err != nil {
		return sandbox.Template{}, notFound("template", name, err)
	}
	return store.DecodeTemplate(data)
}
