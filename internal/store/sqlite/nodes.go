package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/zeish/zeish/internal/store"
)

// UpdateNode reads (or starts) the node's row, applies fn, writes it back.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.NodeRecord) error) (store.NodeRecord, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.NodeRecord{}, err
	}
	defer tx.Rollback()
	n := store.NodeRecord{ID: id}
	var data string
	switch err := tx.QueryRowContext(ctx, `SELECT data FROM nodes WHERE id = ?`, id).Scan(&data); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return n, err
	default:
		if err := json.Unmarshal([]byte(data), &n); err != nil {
			return n, err
		}
	}
	if err := fn(&n); err != nil {
		return n, err
	}
	n.ID = id
	b, err := json.Marshal(n)
	if err != nil {
		return n, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, data) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET data = excluded.data`, id, string(b)); err != nil {
		return n, err
	}
	return n, tx.Commit()
}

// GetNode reads one node.
func (s *Store) GetNode(ctx context.Context, id string) (store.NodeRecord, error) {
	var data string
	if err := s.db.QueryRowContext(ctx, `SELECT data FROM nodes WHERE id = ?`, id).Scan(&data); err != nil {
		return store.NodeRecord{}, notFound("node", id, err)
	}
	var n store.NodeRecord
	return n, json.Unmarshal([]byte(data), &n)
}

// ListNodes lists every node by id.
func (s *Store) ListNodes(ctx context.Context) ([]store.NodeRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM nodes ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.NodeRecord
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var n store.NodeRecord
		if err := json.Unmarshal([]byte(data), &n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
