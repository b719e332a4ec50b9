package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Plan is the quota every account gets.
type Plan struct {
	RunningSlots     int // sandboxes starting, running or paused at once
	CreatesPerMinute int // creates (a fork of N counts N) per minute, as a token bucket
	DailyCreates     int // creates per UTC day
}

// DefaultPlan is the plan when the configuration names none.
var DefaultPlan = Plan{RunningSlots: 10, CreatesPerMinute: 30, DailyCreates: 500}

// quotas admits creates, forks, starts and resumes against the plan. It is
// the one place that counts. The counting happens in the store's quota
// transaction (store.QuotaTx): the account's rate bucket, its live
// sandboxes and the holds of operations in flight are read and changed
// there, serialised per account across every replica on the database, so
// two replicas cannot together exceed a quota.
type quotas struct {
	plan  Plan
	store store.Store
	now   func() time.Time
	log   *slog.Logger
}

// holdTTL bounds how long an operation's hold counts: one whose replica
// died mid-operation stops holding the account's quota after it.
const holdTTL = 30 * time.Minute

func newQuotas(plan Plan, st store.Store) *quotas {
	return &quotas{plan: plan, store: st, now: time.Now, log: slog.Default()}
}

// retryError is a refusal that says when to try again (Retry-After).
type retryError struct {
	err   error
	after time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// RetryAfterSeconds says, for a refusal that can be retried, after how many
// seconds (the Retry-After header).
func RetryAfterSeconds(err error) (int, bool) {
	var re *retryError
	if errors.As(err, &re) {
		return max(1, int(math.Ceil(re.after.Seconds()))), true
	}
	if errdefs.Of(err) == errdefs.ErrRateLimited {
		return 1, true
	}
	return 0, false
}

// admit reserves a running slot for each of the sandboxes ids (not
// counting the sandbox exclude, which already holds one) and, when creates
// is set, as many creates from the rate limit and the daily cap: all or
// none. Until done their rows count through the hold only, so a record
// written before done is not counted twice. done must be called once the
// operation has recorded its sandboxes (or failed; made says how many it
// created, and the rate tokens of the others are given back).
func (q *quotas) admit(ctx context.Context, account string, ids []string, creates bool, exclude string) (done func(made int), err error) {
	now, n := q.now(), len(ids)
	hold := store.QuotaHold{ID: sandbox.NewID("hold"), AccountID: account, Sandboxes: ids, Slots: n, Expires: now.Add(holdTTL)}
	if creates {
		hold.Creates = n
	}
	err = q.store.InQuotaTx(ctx, account, now, func(tx store.QuotaTx) error {
		used, err := tx.UsedSlots(exclude)
		if err != nil {
			return err
		}
		if used+n > q.plan.RunningSlots {
			return fmt.Errorf("%d of %d running slots in use, this needs %d (stop or delete a sandbox first): %w",
				used, q.plan.RunningSlots, n, errdefs.ErrRunningSlots)
		}
		if creates {
			if err := q.takeCreates(tx, n, now); err != nil {
				return err
			}
		}
		return tx.AddHold(hold)
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func(made int) {
		once.Do(func() {
			// The operation's own context may be gone; the hold must still go.
			ctx := context.WithoutCancel(ctx)
			err := q.store.InQuotaTx(ctx, account, q.now(), func(tx store.QuotaTx) error {
				if err := tx.DropHold(hold.ID); err != nil {
					return err
				}
				if !creates || made >= n {
					return nil
				}
				tokens, at, _, err := tx.Bucket()
				if err != nil {
					return err
				}
				return tx.SetBucket(min(float64(q.plan.CreatesPerMinute), tokens+float64(n-made)), at)
			})
			if err != nil {
				q.log.Warn("quota: release hold (it lapses by itself)", "account", account, "hold", hold.ID, "err", err)
			}
		})
	}, nil
}

// takeCreates takes n creates from the daily cap and the rate bucket.
func (q *quotas) takeCreates(tx store.QuotaTx, n int, now time.Time) error {
	day := now.UTC().Truncate(24 * time.Hour)
	today, err := tx.CreatedSince(day)
	if err != nil {
		return err
	}
	if today+n > q.plan.DailyCreates {
		return &retryError{after: day.Add(24 * time.Hour).Sub(now),
			err: fmt.Errorf("%d of %d creates today (UTC), this needs %d: %w", today, q.plan.DailyCreates, n, errdefs.ErrDailyCap)}
	}
	tokens, at, ok, err := tx.Bucket()
	if err != nil {
		return err
	}
	tokens = refill(tokens, at, ok, now, float64(q.plan.CreatesPerMinute))
	if tokens < float64(n) {
		rate := float64(q.plan.CreatesPerMinute) / 60 // tokens per second
		after := time.Minute
		if rate > 0 && n <= q.plan.CreatesPerMinute {
			after = time.Duration((float64(n) - tokens) / rate * float64(time.Second))
		}
		return &retryError{after: after,
			err: fmt.Errorf("at most %d creates per minute (this needs %d): %w", q.plan.CreatesPerMinute, n, errdefs.ErrRateLimited)}
	}
	return tx.SetBucket(tokens-float64(n), now)
}

// refill is a token bucket of capacity tokens, filling at capacity per
// minute: full when it has never been used.
func refill(tokens float64, at time.Time, ok bool, now time.Time, capacity float64) float64 {
	if !ok {
		return capacity
	}
	if now.After(at) {
		tokens += now.Sub(at).Seconds() * capacity / 60
	}
	return min(capacity, tokens)
}
