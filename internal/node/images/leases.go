package images

import "sync"

// A Lease keeps an image from gc and from the cold tier while an operation
// needs it but no record names it yet: an image being written, children
// being started from it, a VM about to map it. Leases live in memory only:
// after a crash none is held, and what only a lease kept is garbage (an
// image the crash cut short), which the first gc removes.
type Lease struct {
	l    *leases
	id   string
	once sync.Once
}

// Release lets go of the image; a second call does nothing.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() { l.l.release(l.id) })
}

// Lease holds image id until the lease is released.
func (s *Store) Lease(id string) *Lease {
	s.leases.acquire(id)
	return &Lease{l: &s.leases, id: id}
}

// Leased says whether an operation holds image id.
func (s *Store) Leased(id string) bool { return s.leases.isHeld(id) }

// leases counts the leases per image.
type leases struct {
	mu   sync.Mutex
	held map[string]int
	// released are the images released since the collection in progress
	// began (nil when none runs): it read the records before the release
	// may have recorded the referrer, so it keeps them this round.
	released map[string]bool
}

func (l *leases) acquire(id string) {
	l.mu.Lock()
	l.held[id]++
	l.mu.Unlock()
}

func (l *leases) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[id]--; l.held[id] <= 0 {
		delete(l.held, id)
	}
	if l.released != nil {
		l.released[id] = true
	}
}

func (l *leases) isHeld(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id] > 0
}

// mark starts a collection: releases from here on are remembered.
func (l *leases) mark() {
	l.mu.Lock()
	l.released = map[string]bool{}
	l.mu.Unlock()
}

// roots ends what mark began: the images leased now or released since.
func (l *leases) roots() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for id := range l.held {
		out[id] = true
	}
	for id := range l.released {
		out[id] = true
	}
	l.released = nil
	return out
}
