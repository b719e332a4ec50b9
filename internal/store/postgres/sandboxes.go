package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// CreateSandboxes inserts rs in one transaction: all or none.
func (s *Store) CreateSandboxes(ctx context.Context, rs ...*store.SandboxRecord) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		for _, r := range rs {
			store.Meter(r, now)
			data, err := s.codec.Encode(r)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO sandboxes (id, account_id, name, state, parent_id, created_at, data)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.ID, r.AccountID, r.Name, string(r.State), nullable(r.ParentID),
				r.CreatedAt.UTC(), data)
			switch uniqueViolation(err) {
			case "":
			case "sandboxes_pkey":
				return fmt.Errorf("sandbox id %s exists: %w", r.ID, errdefs.ErrInternal)
			default:
				return fmt.Errorf("a sandbox named %q exists: %w", r.Name, errdefs.ErrNameTaken)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// GetSandbox reads one sandbox.
func (s *Store) GetSandbox(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return s.getSandbox(ctx, s.pool.QueryRow(ctx, `SELECT data FROM sandboxes WHERE id = $1`, id), id)
}

func (s *Store) getSandbox(_ context.Context, row pgx.Row, id string) (*store.SandboxRecord, error) {
	var data string
	if err := row.Scan(&data); err != nil {
		return nil, notFound("sandbox", id, err)
	}
	return s.codec.Decode(id, data)
}

// SandboxByName finds a live sandbox by its account and name.
func (s *Store) SandboxByName(ctx context.Context, accountID, name string) (*store.SandboxRecord, error) {
	var id, data string
	err := s.pool.QueryRow(ctx, `SELECT id, data FROM sandboxes WHERE account_id = $1 AND name = $2 AND state != $3`,
		accountID, name, string(sandbox.StateDestroyed)).Scan(&id, &data)
	if err != nil {
		return nil, notFound("sandbox named", name, err)
	}
	return s.codec.Decode(id, data)
}

// CountCreated counts the account's sandboxes created at or after since.
func (s *Store) CountCreated(ctx context.Context, accountID string, since time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE account_id = $1 AND created_at >= $2`,
		accountID, since.UTC()).Scan(&n)
	return n, err
}

// ListSandboxes returns the sandboxes that match f, oldest first.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.SandboxRecord, error) {
	states := make([]string, len(f.States))
	for i, st := range f.States {
		states[i] = string(st)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, data FROM sandboxes
		WHERE ($1 = '' OR account_id = $1)
		  AND (cardinality($2::text[]) = 0 OR state = ANY($2))
		  AND (cardinality($2::text[]) > 0 OR $3 OR state != 'destroyed')
		  AND ($4 = '' OR (created_at, id) > (SELECT created_at, id FROM sandboxes WHERE id = $4))
		ORDER BY created_at, id
		LIMIT CASE WHEN $5 > 0 THEN $5 END`, f.AccountID, states, f.IncludeDestroyed, f.After, f.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.SandboxRecord, error) {
		var id, data string
		if err := r.Scan(&id, &data); err != nil {
			return nil, err
		}
		return s.codec.Decode(id, data)
	})
}

// UpdateSandbox applies fn to the stored sandbox in one transaction, the row
// locked so that concurrent updates (from any replica) apply one after another.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*store.SandboxRecord) error) (*store.SandboxRecord, error) {
	var out *store.SandboxRecord
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := s.getSandbox(ctx, tx.QueryRow(ctx, `SELECT data FROM sandboxes WHERE id = $1 FOR UPDATE`, id), id)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
		store.Meter(r, time.Now().UTC())
		data, err := s.codec.Encode(r)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE sandboxes SET name = $1, state = $2, parent_id = $3, data = $4 WHERE id = $5`,
			r.Name, string(r.State), nullable(r.ParentID), data, id)
		if uniqueViolation(err) != "" {
			return fmt.Errorf("a sandbox named %q exists: %w", r.Name, errdefs.ErrNameTaken)
		}
		out = r
		return err
	})
	return out, err
}

// CreateSnapshot inserts r unless the sandbox has limit snapshots already.
// The count and the insert hold a lock on the sandbox's id, so two replicas
// cannot both take the last place.
func (s *Store) CreateSnapshot(ctx context.Context, r *store.SnapshotRecord, limit int) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, r.SandboxID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM snapshots WHERE sandbox_id = $1`, r.SandboxID).Scan(&n); err != nil {
			return err
		}
		if n >= limit {
			return fmt.Errorf("sandbox %s has %d snapshots, the most it may keep; delete one first: %w", r.SandboxID, n, errdefs.ErrLimitReached)
		}
		_, err := tx.Exec(ctx, `INSERT INTO snapshots (id, sandbox_id, name, created_at, data) VALUES ($1, $2, $3, $4, $5)`,
			r.ID, r.SandboxID, r.Name, r.CreatedAt.UTC(), string(data))
		if uniqueViolation(err) != "" {
			return fmt.Errorf("sandbox %s already has a snapshot named %q: %w", r.SandboxID, r.Name, errdefs.ErrNameTaken)
		}
		return err
	})
}

// GetSnapshot reads one snapshot.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	return scanSnapshot(s.pool.QueryRow(ctx, `SELECT data FROM snapshots WHERE id = $1`, id), "snapshot", id)
}

// SnapshotByName finds a sandbox's snapshot by name.
func (s *Store) SnapshotByName(ctx context.Context, sandboxID, name string) (*store.SnapshotRecord, error) {
	return scanSnapshot(s.pool.QueryRow(ctx, `SELECT data FROM snapshots WHERE sandbox_id = $1 AND name = $2`, sandboxID, name),
		"snapshot named", name)
}

func scanSnapshot(row pgx.Row, what, ref string) (*store.SnapshotRecord, error) {
	var data string
	if err := row.Scan(&data); err != nil {
		return nil, notFound(what, ref, err)
	}
	r := new(store.SnapshotRecord)
	return r, json.Unmarshal([]byte(data), r)
}

// ListSnapshots returns a sandbox's snapshots, oldest first; "" lists all.
func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]*store.SnapshotRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT data FROM snapshots WHERE $1 = '' OR sandbox_id = $1 ORDER BY created_at, id`, sandboxID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.SnapshotRecord, error) {
		var data string
		if err := r.Scan(&data); err != nil {
			return nil, err
		}
		snap := new(store.SnapshotRecord)
		return snap, json.Unmarshal([]byte(data), snap)
	})
}

// DeleteSnapshot removes one snapshot.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("snapshot %s not found: %w", id, errdefs.ErrNotFound)
	}
	return nil
}
