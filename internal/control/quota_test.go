package control

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// TestQuotas drives admit through a sequence of calls against one plan,
// with sandboxes in the store and a controlled clock.
func TestQuotas(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	q := newQuotas(Plan{RunningSlots: 3, CreatesPerMinute: 4, DailyCreates: 6}, st)
	q.now = func() time.Time { return now }
	add := func(id string, state sandbox.State) {
		if err := st.CreateSandboxes(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: id, AccountID: "acc_a",
			State: state, CreatedAt: now}}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name    string
		setup   func()
		n       int
		creates bool
		exclude string
		made    int
		want    *errdefs.Error
		retry   time.Duration // at least
	}{
		{"fork of 3 fits 3 slots", nil, 3, true, "", 0, nil, 0},
		{"fork of 4 needs 4 slots: none", nil, 4, true, "", 0, errdefs.ErrRunningSlots, 0},
		{"two running take 2 slots", func() { add("sbx_1", sandbox.StateRunning); add("sbx_2", sandbox.StatePaused) }, 2, true, "", 2, errdefs.ErrRunningSlots, 0},
		{"one more fits", nil, 1, true, "", 1, nil, 0},
		{"stopped holds no slot", func() { add("sbx_3", sandbox.StateStopped) }, 1, false, "sbx_3", 1, nil, 0},
		{"resume of the paused one needs only its own slot", func() { add("sbx_4", sandbox.StateRunning) }, 1, false, "sbx_2", 0, nil, 0},
		{"start needs a free slot", nil, 1, false, "sbx_3", 0, errdefs.ErrRunningSlots, 0},
	}
	for _, s := range steps {
		if s.setup != nil {
			s.setup()
		}
		done, err := q.admit(ctx, "acc_a", holdIDs(s.n, s.exclude), s.creates, s.exclude)
		if s.want == nil {
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			done(s.made)
		} else if !errors.Is(err, s.want) {
			t.Fatalf("%s: got %v, want %s", s.name, err, s.want.Code)
		}
	}

	// Rate: 4 per minute; 3 tokens went to the fork of 3 (refunded: it made
	// none), 1 to "one more fits" (made 1). Another account has its own bucket.
	q2 := newQuotas(Plan{RunningSlots: 100, CreatesPerMinute: 2, DailyCreates: 1000}, st)
	q2.now = func() time.Time { return now }
	for i, want := range []*errdefs.Error{nil, nil, errdefs.ErrRateLimited} {
		done, err := q2.admit(ctx, "acc_b", holdIDs(1, ""), true, "")
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("create %d: %v, want %v", i, err, want)
		}
		if err == nil {
			done(1)
		} else if secs, ok := RetryAfterSeconds(err); !ok || secs != 30 {
			t.Fatalf("Retry-After = %d %v, want 30 (one token at 2 per minute)", secs, ok)
		}
	}
	if _, err := q2.admit(ctx, "acc_c", holdIDs(2, ""), true, ""); err != nil {
		t.Fatalf("another account: %v", err)
	}
	now = now.Add(30 * time.Second) // one token back
	if done, err := q2.admit(ctx, "acc_b", holdIDs(1, ""), true, ""); err != nil {
		t.Fatalf("after 30 s: %v", err)
	} else {
		done(0) // failed: the token comes back
	}
	if done, err := q2.admit(ctx, "acc_b", holdIDs(1, ""), true, ""); err != nil {
		t.Fatalf("refunded token: %v", err)
	} else {
		done(1)
	}
	if _, err := q2.admit(ctx, "acc_b", holdIDs(3, ""), true, ""); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("more than the bucket holds: %v", err)
	}

	// Daily cap: acc_a has 4 sandboxes created today in the store.
	q3 := newQuotas(Plan{RunningSlots: 100, CreatesPerMinute: 100, DailyCreates: 5}, st)
	q3.now = func() time.Time { return now }
	if _, err := q3.admit(ctx, "acc_a", holdIDs(2, ""), true, ""); !errors.Is(err, errdefs.ErrDailyCap) {
		t.Fatalf("daily cap: %v", err)
	} else if secs, _ := RetryAfterSeconds(err); secs != 12*3600-30 {
		t.Fatalf("daily cap Retry-After = %d, want until midnight UTC", secs)
	}
	if _, err := q3.admit(ctx, "acc_a", holdIDs(1, ""), true, ""); err != nil {
		t.Fatalf("last create of the day: %v", err)
	}
	// Zero slots refuse at once.
	q4 := newQuotas(Plan{RunningSlots: 0, CreatesPerMinute: 100, DailyCreates: 100}, st)
	if _, err := q4.admit(ctx, "acc_z", holdIDs(1, ""), true, ""); !errors.Is(err, errdefs.ErrRunningSlots) {
		t.Fatalf("zero slots: %v", err)
	}
}

// holdIDs names the sandboxes of an admission: the one a start or resume
// is for (exclude), else n new ones.
func holdIDs(n int, exclude string) []string {
	if exclude != "" {
		return []string{exclude}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = sandbox.NewID(sandbox.PrefixSandbox)
	}
	return ids
}

// A sandbox whose record is written while its admission's hold still
// stands counts once: concurrent admissions get the slot that is free.
func TestRecordedSandboxCountsOnceWhileHeld(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLite(t)
	q := newQuotas(Plan{RunningSlots: 2, CreatesPerMinute: 100, DailyCreates: 2}, st)
	done, err := q.admit(ctx, "acc_h", []string{"sbx_held"}, true, "")
	if err != nil {
		t.Fatal(err)
	}
	// The node writes the record before the operation calls done.
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_held", Name: "held", AccountID: "acc_h",
		State: sandbox.StateStarting, CreatedAt: time.Now().UTC()}}
	if err := st.CreateSandboxes(ctx, r); err != nil {
		t.Fatal(err)
	}
	second, err := q.admit(ctx, "acc_h", holdIDs(1, ""), true, "")
	if err != nil {
		t.Fatalf("the second of 2 slots (and creates) while the first's record and hold both stand: %v", err)
	}
	done(1)
	second(0)
	if _, err := q.admit(ctx, "acc_h", holdIDs(2, ""), true, ""); !errors.Is(err, errdefs.ErrRunningSlots) {
		t.Fatalf("after done, the record counts: got %v, want running_slots_full", err)
	}
}
