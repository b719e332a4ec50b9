package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Sandboxes are stored as one JSON document (store.Codec) plus the columns
// we query on, so a new field needs no migration.

func (s *Store) encode(r *store.SandboxRecord) (string, error) { return s.codec.Encode(r) }

func (s *Store) decode(id, data string) (*store.SandboxRecord, error) {
	return s.codec.Decode(id, data)
}

// CreateSandboxes inserts rs in one transaction: all or none.
func (s *Store) CreateSandboxes(ctx context.Context, rs ...*store.SandboxRecord) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now().UTC()
	for _, r := range rs {
		store.Meter(r, now)
		data, err := s.encode(r)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes (id, account_id, name, state, parent_id, created_at, data)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, r.ID, r.AccountID, r.Name, r.State, nullable(r.ParentID),
			r.CreatedAt.UTC().Format(timeFormat), data)
		if isUniqueViolation(err) {
			if strings.Contains(err.Error(), "sandboxes.id") {
				return fmt.Errorf("sandbox id %s exists: %w", r.ID, errdefs.ErrInternal)
			}
			return fmt.Errorf("a sandbox named %q exists: %w", r.Name, errdefs.ErrNameTaken)
		}
		if err != nil {
			return err
		}
	}
	return tx.Commit()
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// GetSandbox reads one sandbox.
func (s *Store) GetSandbox(ctx context.Context, id string) (*store.SandboxRecord, error) {
	return s.getSandbox(ctx, s.db, id)
}

// SandboxByName finds a live sandbox by its account and name.
func (s *Store) SandboxByName(ctx context.Context, accountID, name string) (*store.SandboxRecord, error) {
	var id, data string
	err := s.db.QueryRowContext(ctx, `SELECT id, data FROM sandboxes WHERE account_id = ? AND name = ? AND state != ?`,
		accountID, name, string(sandbox.StateDestroyed)).Scan(&id, &data)
	if err != nil {
		return nil, notFound("sandbox named", name, err)
	}
	return s.decode(id, data)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) getSandbox(ctx context.Context, q queryer, id string) (*store.SandboxRecord, error) {
	var data string
	if err := q.QueryRowContext(ctx, `SELECT data FROM sandboxes WHERE id = ?`, id).Scan(&data); err != nil {
		return nil, notFound("sandbox", id, err)
	}
	return s.decode(id, data)
}

// CountCreated counts the account's sandboxes created at or after since.
func (s *Store) CountCreated(ctx context.Context, accountID string, since time.Time) (int, error) {
	var n int
	// julianday: RFC 3339 strings with and without fractions do not compare
	// as text.
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE account_id = ? AND julianday(created_at) >= julianday(?)`,
		accountID, since.UTC().Format(timeFormat)).Scan(&n)
	return n, err
}

// ListSandboxes returns the sandboxes that match f, oldest first.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.SandboxRecord, error) {
	var where []string
	var args []any
	if f.AccountID != "" {
		where = append(where, "account_id = ?")
		args = append(args, f.AccountID)
	}
	if len(f.States) > 0 {
		clause, stateArgs := stateIn(f.States)
		where, args = append(where, clause), append(args, stateArgs...)
	} else if !f.IncludeDestroyed {
		where = append(where, "state != ?")
		args = append(args, string(sandbox.StateDestroyed))
	}
	if f.After != "" {
		where = append(where, "(created_at, id) > (SELECT created_at, id FROM sandboxes WHERE id = ?)")
		args = append(args, f.After)
	}
	q := `SELECT data FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at, id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.SandboxRecord
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		r, err := s.decode("", data)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// UpdateSandbox applies fn to the stored sandbox in one transaction.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*store.SandboxRecord) error) (*store.SandboxRecord, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	r, err := s.getSandbox(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if err := fn(r); err != nil {
		return nil, err
	}
	store.Meter(r, time.Now().UTC())
	data, err := s.encode(r)
	if err != nil {
		return nil, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET name = ?, state = ?, parent_id = ?, data = ? WHERE id = ?`,
		r.Name, r.State, nullable(r.ParentID), data, id)
	if isUniqueViolation(err) {
		return nil, fmt.Errorf("a sandbox named %q exists: %w", r.Name, errdefs.ErrNameTaken)
	}
	if err != nil {
		return nil, err
	}
	return r, tx.Commit()
}

// stateIn is "state IN (?, …)" for states, with its arguments.
func stateIn(states []sandbox.State) (string, []any) {
	marks := make([]string, len(states))
	args := make([]any, len(states))
	for i, st := range states {
		marks[i], args[i] = "?", string(st)
	}
	return "state IN (" + strings.Join(marks, ",") + ")", args
}
