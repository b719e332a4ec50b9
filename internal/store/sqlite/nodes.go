package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
)

// UpdateNode reads (or starts) the node's row, applies fn, writes it back.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.NodeRecord) error) (store.NodeRecord, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.NodeRecord{}, err
	}
	defer tx.Rollback()
	n, err := readNode(ctx, tx, id)
	if err != nil {
		return n, err
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

// CreateJoinToken stores t.
func (s *Store) CreateJoinToken(ctx context.Context, t store.JoinToken) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO node_join_tokens (id, data) VALUES (?, ?)`, t.ID, string(b))
	if isUniqueViolation(err) {
		return fmt.Errorf("join token %s: %w", t.ID, errdefs.ErrNameTaken)
	}
	return err
}

// JoinNode reads the token and the node, applies fn and writes both, in
// one transaction (SQLite has one writer at a time).
func (s *Store) JoinNode(ctx context.Context, tokenID, nodeID string, fn func(*store.JoinToken, *store.NodeRecord) error) (store.NodeRecord, error) {
	n := store.NodeRecord{ID: nodeID}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return n, err
	}
	defer tx.Rollback()
	var data string
	if err := tx.QueryRowContext(ctx, `SELECT data FROM node_join_tokens WHERE id = ?`, tokenID).Scan(&data); err != nil {
		return n, notFound("join token", tokenID, err)
	}
	var t store.JoinToken
	if err := json.Unmarshal([]byte(data), &t); err != nil {
		return n, err
	}
	if n, err = readNode(ctx, tx, nodeID); err != nil {
		return n, err
	}
	if err := fn(&t, &n); err != nil {
		return n, err
	}
	n.ID, t.ID = nodeID, tokenID
	tb, err := json.Marshal(t)
	if err != nil {
		return n, err
	}
	nb, err := json.Marshal(n)
	if err != nil {
		return n, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE node_join_tokens SET data = ? WHERE id = ?`, string(tb), tokenID); err != nil {
		return n, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, data) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET data = excluded.data`, nodeID, string(nb)); err != nil {
		return n, err
	}
	return n, tx.Commit()
}

// readNode reads node id in tx; a new one is a zero record with its ID.
func readNode(ctx context.Context, tx *sql.Tx, id string) (store.NodeRecord, error) {
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
	return n, nil
}
