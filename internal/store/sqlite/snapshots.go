package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// CreateSnapshot inserts r unless the sandbox has limit snapshots already.
func (s *Store) CreateSnapshot(ctx context.Context, r *store.SnapshotRecord, limit int) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM snapshots WHERE sandbox_id = ?`, r.SandboxID).Scan(&n); err != nil {
		return err
	}
	if n >= limit {
		return fmt.Errorf("sandbox %s has %d snapshots, the most it may keep; delete one first: %w", r.SandboxID, n, errdefs.ErrLimitReached)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO snapshots (id, sandbox_id, name, created_at, data) VALUES (?, ?, ?, ?, ?)`,
		r.ID, r.SandboxID, r.Name, r.CreatedAt.UTC().Format(timeFormat), string(data))
	if isUniqueViolation(err) {
		return fmt.Errorf("sandbox %s already has a snapshot named %q: %w", r.SandboxID, r.Name, errdefs.ErrNameTaken)
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// GetSnapshot reads one snapshot.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	var data string
	if err := s.db.QueryRowContext(ctx, `SELECT data FROM snapshots WHERE id = ?`, id).Scan(&data); err != nil {
		return nil, notFound("snapshot", id, err)
	}
	r := new(store.SnapshotRecord)
	return r, json.Unmarshal([]byte(data), r)
}

// SnapshotByName finds a sandbox's snapshot by name.
func (s *Store) SnapshotByName(ctx context.Context, sandboxID, name string) (*store.SnapshotRecord, error) {
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM snapshots WHERE sandbox_id = ? AND name = ?`, sandboxID, name).Scan(&data)
	if err != nil {
		return nil, notFound("snapshot named", name, err)
	}
	r := new(store.SnapshotRecord)
	return r, json.Unmarshal([]byte(data), r)
}

// ListSnapshots returns a sandbox's snapshots, oldest first; "" lists all.
func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]*store.SnapshotRecord, error) {
	q, args := `SELECT data FROM snapshots ORDER BY created_at, id`, []any{}
	if sandboxID != "" {
		q, args = `SELECT data FROM snapshots WHERE sandbox_id = ? ORDER BY created_at, id`, []any{sandboxID}
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.SnapshotRecord
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		r := new(store.SnapshotRecord)
		if err := json.Unmarshal([]byte(data), r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteSnapshot removes one snapshot.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("snapshot %s not found: %w", id, errdefs.ErrNotFound)
	}
	return nil
}
