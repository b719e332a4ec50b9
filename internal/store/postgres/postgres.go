// Package postgres is the PostgreSQL store (pgx): what several control-plane
// replicas share. It keeps the same documents as the SQLite store (see
// store.Codec) and passes the same conformance suite (storetest). Writes that
// check a limit first (a sandbox's snapshots) serialise on a transaction-scoped
// advisory lock, so replicas cannot together exceed it.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/internal/store"
)

// Store is a PostgreSQL-backed store.Store.
type Store struct {
	pool  *pgxpool.Pool
	codec store.Codec
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithSecrets seals sandbox secrets with box; without it the store refuses
// to keep secrets at all rather than write them in the clear.
func WithSecrets(box *secrets.Box) Option { return func(s *Store) { s.codec.Secrets = box } }

// migrations run in order, once each, under an advisory lock (replicas
// starting together migrate once); never edit one that has shipped.
var migrations = []string{
	`CREATE TABLE accounts (
		id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin BOOLEAN NOT NULL, created_at TIMESTAMPTZ NOT NULL);
	CREATE TABLE api_keys (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id), hash TEXT NOT NULL UNIQUE,
		prefix TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL, revoked_at TIMESTAMPTZ);
	CREATE TABLE templates (name TEXT PRIMARY KEY, data TEXT NOT NULL);
	CREATE TABLE sandboxes (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,
		parent_id TEXT, created_at TIMESTAMPTZ NOT NULL, data TEXT NOT NULL);
	CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(account_id, name) WHERE state != 'destroyed';
	CREATE INDEX sandboxes_parent ON sandboxes(parent_id);
	CREATE INDEX sandboxes_account_created ON sandboxes(account_id, created_at);
	CREATE TABLE snapshots (
		id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL, data TEXT NOT NULL);
	CREATE UNIQUE INDEX snapshots_name ON snapshots(sandbox_id, name);`,
	`CREATE TABLE quota_holds (
		id TEXT PRIMARY KEY, account_id TEXT NOT NULL, slots INTEGER NOT NULL, creates INTEGER NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
	CREATE INDEX quota_holds_account ON quota_holds(account_id);
	CREATE TABLE rate_buckets (account_id TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, at TIMESTAMPTZ NOT NULL);
	CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);`,
	`CREATE TABLE nodes (id TEXT PRIMARY KEY, data TEXT NOT NULL);`,
	`CREATE TABLE account_secrets (
		account_id TEXT NOT NULL, name TEXT NOT NULL, sealed TEXT NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (account_id, name));`,
	`CREATE TABLE node_join_tokens (id TEXT PRIMARY KEY, data TEXT NOT NULL);`,
	// The sandboxes a hold is for (store.QuotaHold).
	`ALTER TABLE quota_holds ADD COLUMN sandboxes TEXT[] NOT NULL DEFAULT '{}';`,
}

// migrateLock is the advisory lock key that serialises migrations.
const migrateLock = 0x7a656973 // "zeis"

// Open connects to url (postgres://…) and migrates the schema.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool}
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var version int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if version > len(migrations) {
			return fmt.Errorf("the database is at schema version %d, newer than this zeishd knows (%d): %w", version, len(migrations), errdefs.ErrInternal)
		}
		for i := version; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, i+1); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// uniqueViolation returns the constraint a unique violation hit, "" if err is
// not one.
func uniqueViolation(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		return pg.ConstraintName
	}
	return ""
}

func notFound(what, id string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %s not found: %w", what, id, errdefs.ErrNotFound)
	}
	return fmt.Errorf("read %s %s: %w", what, id, err)
}
