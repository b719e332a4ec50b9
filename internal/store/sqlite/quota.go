package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// InQuotaTx runs fn in one transaction. The store has a single connection
// and SQLite one writer, so admissions are serialised without a lock of
// our own (a SQLite database has one zeishd).
func (s *Store) InQuotaTx(ctx context.Context, account string, now time.Time, fn func(store.QuotaTx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM quota_holds WHERE account_id = ? AND julianday(expires_at) <= julianday(?)`,
		account, now.UTC().Format(timeFormat)); err != nil {
		return err
	}
	if err := fn(&quotaTx{ctx: ctx, tx: tx, account: account}); err != nil {
		return err
	}
	return tx.Commit()
}

type quotaTx struct {
	ctx     context.Context
	tx      *sql.Tx
	account string
}

func (q *quotaTx) UsedSlots(exclude string) (int, error) {
	clause, states := stateIn(sandbox.SlotStates)
	var rows, held int
	err := q.tx.QueryRowContext(q.ctx, `SELECT COUNT(*) FROM sandboxes s WHERE account_id = ? AND id != ? AND `+clause+
		` AND NOT EXISTS (SELECT 1 FROM quota_holds h WHERE h.account_id = s.account_id AND instr(h.sandboxes, ' ' || s.id || ' ') > 0)`,
		append([]any{q.account, exclude}, states...)...).Scan(&rows)
	if err != nil {
		return 0, err
	}
	err = q.tx.QueryRowContext(q.ctx, `SELECT COALESCE(SUM(slots), 0) FROM quota_holds WHERE account_id = ?`, q.account).Scan(&held)
	return rows + held, err
}

func (q *quotaTx) CreatedSince(since time.Time) (int, error) {
	var rows, held int
	err := q.tx.QueryRowContext(q.ctx, `SELECT COUNT(*) FROM sandboxes s WHERE account_id = ? AND julianday(created_at) >= julianday(?)
		AND NOT EXISTS (SELECT 1 FROM quota_holds h WHERE h.account_id = s.account_id AND h.creates > 0 AND instr(h.sandboxes, ' ' || s.id || ' ') > 0)`,
		q.account, since.UTC().Format(timeFormat)).Scan(&rows)
	if err != nil {
		return 0, err
	}
	err = q.tx.QueryRowContext(q.ctx, `SELECT COALESCE(SUM(creates), 0) FROM quota_holds WHERE account_id = ?`, q.account).Scan(&held)
	return rows + held, err
}

func (q *quotaTx) Bucket() (float64, time.Time, bool, error) {
	var tokens float64
	var at string
	err := q.tx.QueryRowContext(q.ctx, `SELECT tokens, at FROM rate_buckets WHERE account_id = ?`, q.account).Scan(&tokens, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, err
	}
	t, err := time.Parse(timeFormat, at)
	return tokens, t, err == nil, err
}

func (q *quotaTx) SetBucket(tokens float64, at time.Time) error {
	_, err := q.tx.ExecContext(q.ctx, `INSERT INTO rate_buckets (account_id, tokens, at) VALUES (?, ?, ?)
		ON CONFLICT(account_id) DO UPDATE SET tokens = excluded.tokens, at = excluded.at`,
		q.account, tokens, at.UTC().Format(timeFormat))
	return err
}

func (q *quotaTx) AddHold(h store.QuotaHold) error {
	ids := ""
	if len(h.Sandboxes) > 0 {
		ids = " " + strings.Join(h.Sandboxes, " ") + " "
	}
	_, err := q.tx.ExecContext(q.ctx, `INSERT INTO quota_holds (id, account_id, sandboxes, slots, creates, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
		h.ID, q.account, ids, h.Slots, h.Creates, h.Expires.UTC().Format(timeFormat))
	return err
}

func (q *quotaTx) DropHold(id string) error {
	_, err := q.tx.ExecContext(q.ctx, `DELETE FROM quota_holds WHERE id = ? AND account_id = ?`, id, q.account)
	return err
}

// TryLease takes name for holder when it is free, expired or already
// holder's.
func (s *Store) TryLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR julianday(leases.expires_at) <= julianday(?)`,
		name, holder, now.Add(ttl).UTC().Format(timeFormat), now.UTC().Format(timeFormat))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReleaseLease gives up holder's lease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder)
	return err
}
