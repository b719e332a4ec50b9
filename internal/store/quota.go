package store

import (
	"context"
	"time"
)

// QuotaHold is what an admitted operation holds of its account's quota
// until its sandboxes are recorded: running slots and creates that the
// rows do not show yet. A hold past Expires no longer counts (its replica
// died mid-operation), so a crash cannot lock an account out for good.
//
// Sandboxes names the sandboxes the hold is for. Their rows do not count
// while the hold does: between a record's write and the hold's drop the
// sandbox would otherwise count twice, and a concurrent admission would be
// refused a slot that is free.
type QuotaHold struct {
	ID        string
	AccountID string
	Sandboxes []string
	Slots     int
	Creates   int
	Expires   time.Time
}

// QuotaTx reads and changes one account's quota state inside one
// transaction that is serialised with every other QuotaTx of that account,
// in this process and in every other replica on the same database; the
// policy (how many, how fast) stays with the caller.
type QuotaTx interface {
	// UsedSlots counts the account's sandboxes in a slot state
	// (sandbox.SlotStates) other than exclude and those a live hold names,
	// plus the slots of live holds.
	UsedSlots(exclude string) (int, error)
	// CreatedSince counts sandboxes created at or after since (destroyed
	// ones included) but those a live hold with creates names, plus the
	// creates of live holds.
	CreatedSince(since time.Time) (int, error)
	// Bucket is the account's create-rate bucket as last saved; ok is false
	// when it has none yet.
	Bucket() (tokens float64, at time.Time, ok bool, err error)
	SetBucket(tokens float64, at time.Time) error
	AddHold(h QuotaHold) error
	// DropHold removes a hold (missing is fine).
	DropHold(id string) error
}

// Quotas is the part of a store that admits work against account quotas
// and hands periodic work to one replica at a time.
type Quotas interface {
	// InQuotaTx runs fn in account's quota transaction (see QuotaTx): fn's
	// error rolls everything back and is returned. Holds past their expiry
	// at now are removed first.
	InQuotaTx(ctx context.Context, account string, now time.Time, fn func(QuotaTx) error) error
	// TryLease takes or renews the lease name for holder until now+ttl and
	// says whether holder has it: a lease another holder has not let expire
	// is not taken. Periodic work (budget stops, timeouts) runs only on the
	// replica that holds its lease.
	TryLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error)
	// ReleaseLease gives up holder's lease (not holding it is fine).
	ReleaseLease(ctx context.Context, name, holder string) error
}
