package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/errdefs"
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

// CreateJoinToken stores t.
func (s *Store) CreateJoinToken(ctx context.Context, t store.JoinToken) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO node_join_tokens (id, data) VALUES ($1, $2)`, t.ID, string(b))
	if uniqueViolation(err) != "" {
		return fmt.Errorf("join token %s: %w", t.ID, errdefs.ErrNameTaken)
	}
	return err
}

// JoinNode locks the token's row, then the node's, applies fn and writes
// both: of two joins racing on one token, the second sees it spent.
func (s *Store) JoinNode(ctx context.Context, tokenID, nodeID string, fn func(*store.JoinToken, *store.NodeRecord) error) (store.NodeRecord, error) {
	n := store.NodeRecord{ID: nodeID}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var data string
		if err := tx.QueryRow(ctx, `SELECT data FROM node_join_tokens WHERE id = $1 FOR UPDATE`, tokenID).Scan(&data); err != nil {
			return notFound("join token", tokenID, err)
		}
		var t store.JoinToken
		if err := json.Unmarshal([]byte(data), &t); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nodes (id, data) VALUES ($1, '{}') ON CONFLICT (id) DO NOTHING`, nodeID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT data FROM nodes WHERE id = $1 FOR UPDATE`, nodeID).Scan(&data); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(data), &n); err != nil {
			return err
		}
		if err := fn(&t, &n); err != nil {
			return err
		}
		n.ID, t.ID = nodeID, tokenID
		tb, err := json.Marshal(t)
		if err != nil {
			return err
		}
		nb, err := json.Marshal(n)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE node_join_tokens SET data = $1 WHERE id = $2`, string(tb), tokenID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE nodes SET data = $1 WHERE id = $2`, string(nb), nodeID)
		return err
	})
	return n, err
}
