package testenv

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Screen collects what a terminal shows and lets a test wait for text in
// it. Writes may come from any goroutine.
type Screen struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{}
}

// NewScreen returns an empty screen.
func NewScreen() *Screen { return &Screen{changed: make(chan struct{}, 1)} }

func (s *Screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// String is everything shown so far.
func (s *Screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Changed is signalled after writes, for a test that polls in its own way.
func (s *Screen) Changed() <-chan struct{} { return s.changed }

// WaitFor waits until want appears, failing the test after within.
func (s *Screen) WaitFor(t testing.TB, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for !strings.Contains(s.String(), want) {
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("the terminal never showed %q; it shows %q", want, s.String())
		}
	}
}
