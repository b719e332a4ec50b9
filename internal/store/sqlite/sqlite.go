// Package sqlite implements store.Store on an embedded SQLite database
// (modernc.org/sqlite: pure Go, no cgo).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store on one SQLite file.
type Store struct {
	db    *sql.DB
	codec store.Codec
}

// Option configures Open.
type Option func(*Store)

// WithSecrets seals sandbox secrets with box. Without it the store refuses
// to keep secrets at all rather than write them in the clear.
func WithSecrets(box *secrets.Box) Option { return func(s *Store) { s.codec.Secrets = box } }

// migrations run in order once each; never edit one that has shipped.
var migrations = []string{
	`CREATE TABLE accounts (
		id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin INTEGER NOT NULL, created_at TEXT NOT NULL);
	CREATE TABLE api_keys (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id), hash TEXT NOT NULL UNIQUE,
		prefix TEXT NOT NULL, created_at TEXT NOT NULL, revoked_at TEXT);
	CREATE TABLE templates (name TEXT PRIMARY KEY, data TEXT NOT NULL);
	CREATE TABLE sandboxes (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,
		parent_id TEXT, created_at TEXT NOT NULL, data TEXT NOT NULL);
	CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(account_id, name) WHERE state != 'destroyed';
	CREATE INDEX sandboxes_parent ON sandboxes(parent_id);`,
	`CREATE TABLE snapshots (
		id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL, created_at TEXT NOT NULL, data TEXT NOT NULL);
	CREATE UNIQUE INDEX snapshots_name ON snapshots(sandbox_id, name);`,
	`CREATE TABLE quota_holds (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL, slots INTEGER NOT NULL, creates INTEGER NOT NULL, expires_at TEXT NOT NULL);
	CREATE INDEX quota_holds_account ON quota_holds(account_id);
	CREATE TABLE rate_buckets (account_id TEXT PRIMARY KEY, tokens REAL NOT NULL, at TEXT NOT NULL);
	CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at TEXT NOT NULL);`,
	`CREATE TABLE nodes (id TEXT PRIMARY KEY, data TEXT NOT NULL);`,
	`CREATE TABLE account_secrets (
		account_id TEXT NOT NULL, name TEXT NOT NULL, sealed TEXT NOT NULL, updated_at TEXT NOT NULL,
		PRIMARY KEY (account_id, name));`,
	`CREATE TABLE node_join_tokens (id TEXT PRIMARY KEY, data TEXT NOT NULL);`,
	// The sandboxes a hold is for, as " id id " (store.QuotaHold).
	`ALTER TABLE quota_holds ADD COLUMN sandboxes TEXT NOT NULL DEFAULT '';`,
}

// Open opens (creating if needed) the database at path and migrates it.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One writer at a time is SQLite's model; a single connection avoids
	// SQLITE_BUSY between our own goroutines.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.sealLegacySecrets(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	var version int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	for i := version; i < len(migrations); i++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// sealLegacySecrets rewrites rows that still hold secrets in the clear (as
// stores before sealing wrote them), then vacuums so no free page keeps the
// old text.
func (s *Store) sealLegacySecrets(ctx context.Context) error {
	if s.codec.Secrets == nil {
		return nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, data FROM sandboxes WHERE data LIKE '%"secret_env":%'`)
	if err != nil {
		return err
	}
	type row struct{ id, data string }
	var legacy []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.data); err != nil {
			rows.Close()
			return err
		}
		legacy = append(legacy, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(legacy) == 0 {
		return err
	}
	for _, r := range legacy {
		rec, err := s.decode(r.id, r.data)
		if err != nil {
			return err
		}
		data, err := s.encode(rec)
		if err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET data = ? WHERE id = ?`, data, r.id); err != nil {
			return err
		}
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("vacuum after sealing secrets: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

const timeFormat = time.RFC3339Nano

func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

func notFound(what, id string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %s not found: %w", what, id, errdefs.ErrNotFound)
	}
	return fmt.Errorf("read %s %s: %w", what, id, err)
}

// CreateAccount inserts a.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO accounts (id, name, admin, created_at) VALUES (?, ?, ?, ?)`,
		a.ID, a.Name, a.Admin, a.CreatedAt.UTC().Format(timeFormat))
	if isUniqueViolation(err) {
		return fmt.Errorf("account %q: %w", a.Name, errdefs.ErrNameTaken)
	}
	return err
}

// GetAccount reads one account.
func (s *Store) GetAccount(ctx context.Context, id string) (store.Account, error) {
	row := s.db.QueryRowContext(ctx, `SELECT id, name, admin, created_at FROM accounts WHERE id = ?`, id)
	a, err := scanAccount(row)
	if err != nil {
		return store.Account{}, notFound("account", id, err)
	}
	return a, nil
}

func scanAccount(row interface{ Scan(...any) error }) (store.Account, error) {
	var a store.Account
	var created string
	if err := row.Scan(&a.ID, &a.Name, &a.Admin, &created); err != nil {
		return a, err
	}
	a.CreatedAt, _ = time.Parse(timeFormat, created)
	return a, nil
}

// CreateAPIKey inserts k (its hash only).
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)`,
		k.ID, k.AccountID, k.Hash, k.Prefix, k.CreatedAt.UTC().Format(timeFormat))
	return err
}

// ListAccounts lists every account, oldest first.
func (s *Store) ListAccounts(ctx context.Context) ([]store.Account, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, admin, created_at FROM accounts ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

const keyColumns = `id, account_id, hash, prefix, created_at, revoked_at`

func scanKey(row interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var created string
	var revoked sql.NullString
	if err := row.Scan(&k.ID, &k.AccountID, &k.Hash, &k.Prefix, &created, &revoked); err != nil {
		return k, err
	}
	k.CreatedAt, _ = time.Parse(timeFormat, created)
	if revoked.Valid {
		t, _ := time.Parse(timeFormat, revoked.String)
		k.RevokedAt = &t
	}
	return k, nil
}

// KeyByHash finds a live key by its hash.
func (s *Store) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("unknown or revoked API key: %w", errdefs.ErrUnauthenticated)
	}
	return k, err
}

// ListAPIKeys lists the keys of one account ("" = every account), oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]store.APIKey, error) {
	q, args := `SELECT `+keyColumns+` FROM api_keys`, []any{}
	if accountID != "" {
		q, args = q+` WHERE account_id = ?`, append(args, accountID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeAPIKey marks a key revoked; the first revocation time is kept.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) (store.APIKey, error) {
	if _, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
		at.UTC().Format(timeFormat), id); err != nil {
		return store.APIKey{}, err
	}
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
	if err != nil {
		return k, notFound("API key", id, err)
	}
	return k, nil
}

// AccountByKeyHash finds the account that owns a live key.
func (s *Store) AccountByKeyHash(ctx context.Context, hash string) (store.Account, error) {
	row := s.db.QueryRowContext(ctx, `SELECT a.id, a.name, a.admin, a.created_at FROM accounts a
		JOIN api_keys k ON k.account_id = a.id WHERE k.hash = ? AND k.revoked_at IS NULL`, hash)
	a, err := scanAccount(row)
	if errors.Is(err, sql.ErrNoRows) {
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
	_, err = s.db.ExecContext(ctx, `INSERT INTO templates (name, data) VALUES (?, ?)
		ON CONFLICT(name) DO UPDATE SET data = excluded.data`, t.Key(), data)
	return err
}

// ListTemplates returns every template, deleted ones included.
func (s *Store) ListTemplates(ctx context.Context) ([]sandbox.Template, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM templates ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sandbox.Template
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		t, err := store.DecodeTemplate(data)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteTemplate removes a template's row (its files are gone).
func (s *Store) DeleteTemplate(ctx context.Context, key string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE name = ?`, key)
	return err
}

// GetTemplate reads a template by its key (see Template.Key).
func (s *Store) GetTemplate(ctx context.Context, name string) (sandbox.Template, error) {
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM templates WHERE name = ?`, name).Scan(&data)
	if err != nil {
		return sandbox.Template{}, notFound("template", name, err)
	}
	return store.DecodeTemplate(data)
}
