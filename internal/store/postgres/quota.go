package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// quotaLockClass is the first key of the two-key advisory locks that
// serialise one account's admissions (the second is the account id's
// hash); two-key locks never collide with the one-key migration lock.
const quotaLockClass = 2

// InQuotaTx runs fn in a transaction that first takes the account's
// advisory lock: replicas admitting for the same account wait for each
// other, so together they cannot exceed a quota.
func (s *Store) InQuotaTx(ctx context.Context, account string, now time.Time, fn func(store.QuotaTx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, quotaLockClass, account); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM quota_holds WHERE account_id = $1 AND expires_at <= $2`, account, now.UTC()); err != nil {
			return err
		}
		return fn(&quotaTx{ctx: ctx, tx: tx, account: account})
	})
}

type quotaTx struct {
	ctx     context.Context
	tx      pgx.Tx
	account string
}

func (q *quotaTx) UsedSlots(exclude string) (int, error) {
	states := make([]string, len(sandbox.SlotStates))
	for i, st := range sandbox.SlotStates {
		states[i] = string(st)
	}
	var n int
	err := q.tx.QueryRow(q.ctx, `SELECT
		(SELECT count(*) FROM sandboxes s WHERE account_id = $1 AND id != $2 AND state = ANY($3)
			AND NOT EXISTS (SELECT 1 FROM quota_holds h WHERE h.account_id = $1 AND s.id = ANY(h.sandboxes))) +
		(SELECT COALESCE(sum(slots), 0) FROM quota_holds WHERE account_id = $1)`, q.account, exclude, states).Scan(&n)
	return n, err
}

func (q *quotaTx) CreatedSince(since time.Time) (int, error) {
	var n int
	err := q.tx.QueryRow(q.ctx, `SELECT
		(SELECT count(*) FROM sandboxes s WHERE account_id = $1 AND created_at >= $2
			AND NOT EXISTS (SELECT 1 FROM quota_holds h WHERE h.account_id = $1 AND h.creates > 0 AND s.id = ANY(h.sandboxes))) +
		(SELECT COALESCE(sum(creates), 0) FROM quota_holds WHERE account_id = $1)`, q.account, since.UTC()).Scan(&n)
	return n, err
}

func (q *quotaTx) Bucket() (float64, time.Time, bool, error) {
	var tokens float64
	var at time.Time
	err := q.tx.QueryRow(q.ctx, `SELECT tokens, at FROM rate_buckets WHERE account_id = $1`, q.account).Scan(&tokens, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	return tokens, at, err == nil, err
}

func (q *quotaTx) SetBucket(tokens float64, at time.Time) error {
	_, err := q.tx.Exec(q.ctx, `INSERT INTO rate_buckets (account_id, tokens, at) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET tokens = excluded.tokens, at = excluded.at`, q.account, tokens, at.UTC())
	return err
}

func (q *quotaTx) AddHold(h store.QuotaHold) error {
	ids := h.Sandboxes
	if ids == nil {
		ids = []string{}
	}
	_, err := q.tx.Exec(q.ctx, `INSERT INTO quota_holds (id, account_id, sandboxes, slots, creates, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		h.ID, q.account, ids, h.Slots, h.Creates, h.Expires.UTC())
	return err
}

func (q *quotaTx) DropHold(id string) error {
	_, err := q.tx.Exec(q.ctx, `DELETE FROM quota_holds WHERE id = $1 AND account_id = $2`, id, q.account)
	return err
}

// TryLease takes name for holder when it is free, expired or already
// holder's; the row lock of the upsert decides between replicas.
func (s *Store) TryLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= $4`, name, holder, now.Add(ttl).UTC(), now.UTC())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseLease gives up holder's lease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder)
	return err
}
