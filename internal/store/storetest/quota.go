package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

func testQuotas(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Now().UTC()
	for i, st := range []sandbox.State{sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStopped} {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: fmt.Sprintf("sbx_q%d", i), Name: fmt.Sprintf("q%d", i),
			AccountID: "acc_q", State: st, CreatedAt: t0}}
		if err := s.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	counts := func(exclude string) (slots, created int) {
		t.Helper()
		err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error {
			var err error
			if slots, err = q.UsedSlots(exclude); err != nil {
				return err
			}
			created, err = q.CreatedSince(t0.Add(-time.Hour))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return slots, created
	}
	// running and paused hold a slot; stopped does not (docs/quotas.md, Quotas).
	if slots, created := counts(""); slots != 2 || created != 3 {
		t.Fatalf("no holds: slots %d created %d, want 2 and 3", slots, created)
	}
	if slots, _ := counts("sbx_q1"); slots != 1 {
		t.Fatalf("excluding the paused one: slots %d, want 1", slots)
	}
	hold := store.QuotaHold{ID: "hold_1", Slots: 2, Creates: 2, Expires: t0.Add(time.Minute)}
	if err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error { return q.AddHold(hold) }); err != nil {
		t.Fatal(err)
	}
	if slots, created := counts(""); slots != 4 || created != 5 {
		t.Fatalf("with a hold: slots %d created %d, want 4 and 5", slots, created)
	}
	// A hold naming sandboxes: their rows count through it only (slots, and
	// creates when it holds creates), so a row written before the hold is
	// dropped is not counted twice.
	named := []store.QuotaHold{
		{ID: "hold_c", Sandboxes: []string{"sbx_q0"}, Slots: 1, Creates: 1, Expires: t0.Add(time.Minute)}, // a create: running, created
		{ID: "hold_s", Sandboxes: []string{"sbx_q2"}, Slots: 1, Creates: 0, Expires: t0.Add(time.Minute)}, // a start: created stays counted
	}
	if err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error { return q.AddHold(named[0]) }); err != nil {
		t.Fatal(err)
	}
	if slots, created := counts(""); slots != 4 || created != 5 {
		t.Fatalf("a hold naming a recorded sandbox: slots %d created %d, want 4 and 5 (its row counted once)", slots, created)
	}
	if err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error { return q.AddHold(named[1]) }); err != nil {
		t.Fatal(err)
	}
	if slots, created := counts(""); slots != 5 || created != 5 {
		t.Fatalf("a start's hold: slots %d created %d, want 5 and 5", slots, created)
	}
	for _, h := range named {
		if err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error { return q.DropHold(h.ID) }); err != nil {
			t.Fatal(err)
		}
	}
	// fn's error rolls back everything it did.
	boom := errors.New("boom")
	err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error {
		if err := q.AddHold(store.QuotaHold{ID: "hold_2", Slots: 5, Expires: t0.Add(time.Minute)}); err != nil {
			return err
		}
		if err := q.SetBucket(1, t0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error: got %v", err)
	}
	if slots, _ := counts(""); slots != 4 {
		t.Fatalf("a rolled back hold counts: slots %d, want 4", slots)
	}
	// Buckets: none, then what was saved.
	err = s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error {
		if _, _, ok, err := q.Bucket(); err != nil || ok {
			return fmt.Errorf("bucket before any save: ok %v err %v", ok, err)
		}
		return q.SetBucket(12.5, t0)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error {
		tokens, at, ok, err := q.Bucket()
		if err != nil || !ok || tokens != 12.5 || !at.Equal(t0.Truncate(time.Microsecond)) && !at.Equal(t0) {
			return fmt.Errorf("bucket = %v %v %v %v, want 12.5 at %v", tokens, at, ok, err, t0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Another account sees none of it.
	err = s.InQuotaTx(ctx, "acc_other", t0, func(q store.QuotaTx) error {
		if n, err := q.UsedSlots(""); err != nil || n != 0 {
			return fmt.Errorf("other account: %d slots, %v", n, err)
		}
		if _, _, ok, _ := q.Bucket(); ok {
			return errors.New("other account has acc_q's bucket")
		}
		return q.DropHold("hold_1") // not its hold: nothing happens
	})
	if err != nil {
		t.Fatal(err)
	}
	if slots, _ := counts(""); slots != 4 {
		t.Fatalf("another account dropped acc_q's hold: slots %d", slots)
	}
	// An expired hold no longer counts; a dropped one neither.
	err = s.InQuotaTx(ctx, "acc_q", t0.Add(2*time.Minute), func(q store.QuotaTx) error {
		if n, err := q.UsedSlots(""); err != nil || n != 2 {
			return fmt.Errorf("after expiry: %d slots, %v; want 2", n, err)
		}
		return q.AddHold(store.QuotaHold{ID: "hold_3", Slots: 1, Expires: t0.Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InQuotaTx(ctx, "acc_q", t0, func(q store.QuotaTx) error { return q.DropHold("hold_3") }); err != nil {
		t.Fatal(err)
	}
	if slots, _ := counts(""); slots != 2 {
		t.Fatalf("after drop: slots %d, want 2", slots)
	}
	testAdmissionsSerialise(t, s, s)
}

// testAdmissionsSerialise admits 20 one-slot holds at once through a and b
// (two replicas on one database, or one store twice) against a limit of 5:
// exactly 5 get in.
func testAdmissionsSerialise(t *testing.T, a, b store.Store) {
	const limit, tries = 5, 20
	ctx := context.Background()
	now := time.Now()
	var wg sync.WaitGroup
	admitted := make(chan bool, tries)
	errs := make(chan error, tries)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			err := s.InQuotaTx(ctx, "acc_race", now, func(q store.QuotaTx) error {
				n, err := q.UsedSlots("")
				if err != nil || n >= limit {
					admitted <- false
					return err
				}
				admitted <- true
				return q.AddHold(store.QuotaHold{ID: fmt.Sprintf("hold_race_%d", i), Slots: 1, Expires: now.Add(time.Hour)})
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(admitted)
	close(errs)
	for err := range errs {
		t.Fatalf("admission: %v", err)
	}
	var n int
	if err := a.InQuotaTx(ctx, "acc_race", now, func(q store.QuotaTx) (err error) { n, err = q.UsedSlots(""); return err }); err != nil {
		t.Fatal(err)
	}
	if n != limit {
		t.Fatalf("%d slots held after %d concurrent admissions, want exactly %d", n, tries, limit)
	}
}

// TestAdmissionsAcrossReplicas is the serialisation check for two stores
// open on one database (PostgreSQL replicas).
func TestAdmissionsAcrossReplicas(t *testing.T, a, b store.Store) { testAdmissionsSerialise(t, a, b) }

func testLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Now()
	steps := []struct {
		what   string
		holder string
		at     time.Duration
		want   bool
	}{
		{"free lease", "r1", 0, true},
		{"held by another", "r2", time.Second, false},
		{"renewed by its holder", "r1", 5 * time.Second, true},
		{"still held (renewal moved expiry)", "r2", 12 * time.Second, false},
		{"expired: taken over", "r2", 16 * time.Second, true},
		{"old holder refused", "r1", 17 * time.Second, false},
	}
	for _, st := range steps {
		ok, err := s.TryLease(ctx, "enforce", st.holder, t0.Add(st.at), 10*time.Second)
		if err != nil || ok != st.want {
			t.Fatalf("%s: TryLease(%s) = %v, %v; want %v", st.what, st.holder, ok, err, st.want)
		}
	}
	if ok, _ := s.TryLease(ctx, "gc", "r1", t0, time.Minute); !ok {
		t.Fatal("leases of other names are independent")
	}
	if err := s.ReleaseLease(ctx, "enforce", "r1"); err != nil { // not its holder: nothing happens
		t.Fatal(err)
	}
	if ok, _ := s.TryLease(ctx, "enforce", "r1", t0.Add(18*time.Second), 10*time.Second); ok {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := s.ReleaseLease(ctx, "enforce", "r2"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.TryLease(ctx, "enforce", "r1", t0.Add(18*time.Second), 10*time.Second); !ok {
		t.Fatal("a released lease was not free")
	}
}
