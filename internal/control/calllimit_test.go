package control

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// A sandbox gets max calls in flight, the next is too_many_requests; an
// account gets its own max across its sandboxes, the next is
// account_calls_full; a finished call frees its slots (once, however often
// released), and other sandboxes and accounts are not affected.
func TestCallLimiter(t *testing.T) {
	l := newCallLimiter(CallLimits{PerSandbox: 2, PerAccount: 3})
	var releases []func()
	take := func(id, acct string, want error) {
		t.Helper()
		rel, err := l.acquire(id, acct)
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("acquire %s of %s: %v, want %v", id, acct, err, want)
		}
		if err == nil {
			releases = append(releases, rel)
		}
	}
	take("sbx_a", "acc_1", nil)
	take("sbx_a", "acc_1", nil)
	take("sbx_a", "acc_1", errdefs.ErrTooManyRequests)
	take("sbx_b", "acc_1", nil)
	take("sbx_c", "acc_1", errdefs.ErrAccountCalls) // the account's third is its last
	take("sbx_d", "acc_2", nil)                     // another account
	for _, e := range []*errdefs.Error{errdefs.ErrTooManyRequests, errdefs.ErrAccountCalls} {
		if errdefs.HTTPStatus(e) != 429 {
			t.Fatalf("%s must be 429", e.Code)
		}
	}
	releases[0]()
	releases[0]()
	if s, a := l.inFlight("sbx_a", "acc_1"); s != 1 || a != 2 {
		t.Fatalf("after one release: sandbox %d, account %d in flight; want 1, 2", s, a)
	}
	take("sbx_c", "acc_1", nil)
	take("sbx_c", "acc_1", errdefs.ErrAccountCalls) // a double release freed one slot, not two
	for _, r := range releases {
		r()
	}
	if s, a := l.inFlight("sbx_a", "acc_1"); s != 0 || a != 0 || len(l.sandboxes) != 0 || len(l.accounts) != 0 {
		t.Fatalf("all released: %v %v", l.sandboxes, l.accounts)
	}
	unlimited := newCallLimiter(CallLimits{})
	for range 1000 {
		if _, err := unlimited.acquire("sbx_a", "acc_1"); err != nil {
			t.Fatalf("no limits: %v", err)
		}
	}
}
