package control

import (
	"context"
	"errors"
	"fmt"
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
// the one place that counts; it keeps per-account state in memory (rate
// buckets, slots promised to calls in flight) and reads the rest from the
// store, so a restart forgets at most one minute of rate history.
type quotas struct {
	plan    Plan
	store   store.Store
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
	pending map[string]int
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newQuotas(plan Plan, st store.Store) *quotas {
	return &quotas{plan: plan, store: st, now: time.Now, buckets: map[string]*bucket{}, pending: map[string]int{}}
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

// admit reserves n running slots for account (not counting the sandbox
// exclude, which already holds one) and, when creates is set, n creates from
// the rate limit and the daily cap: all or none. done must be called once
// the operation has recorded its sandboxes (or failed; made says how many
// it created, and the rate tokens of the others are given back).
func (q *quotas) admit(ctx context.Context, account string, n int, creates bool, exclude string) (done func(made int), err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	live, err := q.store.ListSandboxes(ctx, store.SandboxFilter{AccountID: account, States: sandbox.SlotStates})
	if err != nil {
		return nil, err
	}
	used := q.pending[account]
	for _, r := range live {
		if r.ID != exclude {
			used++
		}
	}
	if used+n > q.plan.RunningSlots {
		return nil, fmt.Errorf("%d of %d running slots in use, this needs %d (stop or delete a sandbox first): %w",
			used, q.plan.RunningSlots, n, errdefs.ErrRunningSlots)
	}
	now := q.now()
	if creates {
		day := now.UTC().Truncate(24 * time.Hour)
		today, err := q.store.CountCreated(ctx, account, day)
		if err != nil {
			return nil, err
		}
		if today+n > q.plan.DailyCreates {
			return nil, &retryError{after: day.Add(24 * time.Hour).Sub(now),
				err: fmt.Errorf("%d of %d creates today (UTC), this needs %d: %w", today, q.plan.DailyCreates, n, errdefs.ErrDailyCap)}
		}
		b := q.bucket(account, now)
		if b.tokens < float64(n) {
			rate := float64(q.plan.CreatesPerMinute) / 60 // tokens per second
			after := time.Minute
			if rate > 0 && n <= q.plan.CreatesPerMinute {
				after = time.Duration((float64(n) - b.tokens) / rate * float64(time.Second))
			}
			return nil, &retryError{after: after,
				err: fmt.Errorf("at most %d creates per minute (this needs %d): %w", q.plan.CreatesPerMinute, n, errdefs.ErrRateLimited)}
		}
		b.tokens -= float64(n)
	}
	q.pending[account] += n
	var once sync.Once
	return func(made int) {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.pending[account] -= n; q.pending[account] <= 0 {
				delete(q.pending, account)
			}
			if creates && made < n {
				b := q.bucket(account, q.now())
				b.tokens = min(float64(q.plan.CreatesPerMinute), b.tokens+float64(n-made))
			}
		})
	}, nil
}

// bucket returns the account's rate bucket, refilled up to now.
func (q *quotas) bucket(account string, now time.Time) *bucket {
	capacity := float64(q.plan.CreatesPerMinute)
	b := q.buckets[account]
	if b == nil {
		b = &bucket{tokens: capacity, at: now}
		q.buckets[account] = b
	}
	if now.After(b.at) {
		b.tokens = min(capacity, b.tokens+now.Sub(b.at).Seconds()*capacity/60)
		b.at = now
	}
	return b
}
