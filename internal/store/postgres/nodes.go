package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/internal/store"
)

// UpdateNode reads (or starts) the node's row under a row lock, applies fn
// and writes it back: two replicas' heartbeats and drains do not lose each
// other's writes.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.NodeRecord) error) (store.NodeRecord, error) {
	n := store.NodeRecord{ID: id}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nodes (id, data) VALUES ($1, '{}') ON CONFLICT (id) DO NOTHING`, id); err != nil {
			return err
		}
		var data string
		if err := tx.QueryRow(ctx, `SELECT data FROM nodes WHERE id = $1 FOR UPDATE`, id).Scan(&data); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(data), &n); err != nil {
			return err
		}
		if err := fn(&n); err != nil {
			return err
		}
		n.ID = id
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE nodes SET data = $1 WHERE id = $2`, string(b), id)
		return err
	})
	return n, err
}

// GetNode reads one node.
func (s *Store) GetNode(ctx context.Context, id string) (store.NodeRecord, error) {
	var data string
	if err := s.pool.QueryRow(ctx, `SELECT data FROM nodes WHERE id = $1 AND data != '{}'`, id).Scan(&data); err != nil {
		return store.NodeRecord{}, notFound("node", id, err)
	}
	var n store.NodeRecord
	return n, json.Unmarshal([]byte(data), &n)
}

// ListNodes lists every node by id.
func (s *Store) ListNodes(ctx context.Context) ([]store.NodeRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT data FROM nodes WHERE data != '{}' ORDER BY id`)
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
