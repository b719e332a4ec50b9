package control

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// A sandbox gets max calls in flight, the next is too_many_requests, a
// finished call frees its slot (once, however often released), and other
// sandboxes are not affected.
func TestCallLimiter(t *testing.T) {
	l := newCallLimiter(2)
	r1, err1 := l.acquire("sbx_a")
	_, err2 := l.acquire("sbx_a")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := l.acquire("sbx_a"); !errors.Is(err, errdefs.ErrTooManyRequests) {
		t.Fatalf("third call: %v, want too_many_requests", err)
	}
	if errdefs.HTTPStatus(errdefs.ErrTooManyRequests) != 429 {
		t.Fatal("too_many_requests must be 429")
	}
	if _, err := l.acquire("sbx_b"); err != nil {
		t.Fatalf("another sandbox: %v", err)
	}
	r1()
	r1()
	if _, err := l.acquire("sbx_a"); err != nil {
		t.Fatalf("after one finished: %v", err)
	}
	if _, err := l.acquire("sbx_a"); !errors.Is(err, errdefs.ErrTooManyRequests) {
		t.Fatalf("a double release freed two slots: %v", err)
	}
}
