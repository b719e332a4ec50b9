package control

import (
	"fmt"
	"sync"

	"github.com/zeish/zeish/errdefs"
)

// MaxCallsPerSandbox bounds a sandbox's data-plane calls in flight: each
// holds a guest stream, a goroutine and buffers on the host, so one client
// (or one busy guest) cannot take the host's memory; past it a call gets
// 429 too_many_requests at once instead of queueing.
const MaxCallsPerSandbox = 32

type callLimiter struct {
	mu       sync.Mutex
	max      int
	inFlight map[string]int
}

func newCallLimiter(max int) *callLimiter {
	return &callLimiter{max: max, inFlight: map[string]int{}}
}

// acquire takes a slot of sandbox id; call the returned func when done.
func (l *callLimiter) acquire(id string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[id] >= l.max {
		return nil, fmt.Errorf("sandbox %s has %d data-plane calls in flight, the most it may: %w", id, l.max, errdefs.ErrTooManyRequests)
	}
	l.inFlight[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.inFlight[id]--; l.inFlight[id] <= 0 {
				delete(l.inFlight, id)
			}
		})
	}, nil
}
