package imagestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// lease keeps a list of chunks live (gc.go) while its holder renews it.
type lease struct {
	s    *Store
	name string

	mu     sync.Mutex
	body   leaseBody
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// startLease writes lease name and renews it every LeaseTTL/4 until
// release. It returns the lease's modification time in the store's clock.
func (s *Store) startLease(ctx context.Context, name string, body leaseBody) (*lease, time.Time, error) {
	at, err := s.putLease(ctx, name, body)
	if err != nil {
		return nil, time.Time{}, err
	}
	l := &lease{s: s, name: name, body: body, stop: make(chan struct{}), done: make(chan struct{})}
	go l.renewLoop(context.WithoutCancel(ctx))
	return l, at, nil
}

func (l *lease) renewLoop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.s.opts.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if _, err := l.renew(ctx); err != nil {
				l.s.log.Warn("image store: renew lease", "lease", l.name, "err", err)
			}
		}
	}
}

// add lists more chunks in the lease (written at the next renew).
func (l *lease) add(digests ...string) {
	l.mu.Lock()
	l.body.Chunks = append(l.body.Chunks, digests...)
	l.mu.Unlock()
}

// renew writes the lease as it stands now.
func (l *lease) renew(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	body := leaseBody{Image: l.body.Image, Kind: l.body.Kind, Chunks: append([]string(nil), l.body.Chunks...)}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return l.s.putLease(ctx, l.name, body)
}

// release stops renewing and deletes the lease.
func (l *lease) release(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return l.s.b.Delete(ctx, leaseKey(l.name))
}

// Hold keeps an image's chunks in the store while a node reads it lazily,
// even if the image is deleted meanwhile (a VM maps its RAM file: a chunk
// gone under it would be a fault it cannot recover from).
type Hold struct{ l *lease }

// Hold starts holding m's chunks for holder (a node id: one hold per node
// and image). It renews itself until Release; a node that crashes stops
// renewing, and its hold expires after LeaseTTL.
func (s *Store) Hold(ctx context.Context, m *Manifest, holder string) (*Hold, error) {
	if err := CheckID("holder", holder); err != nil {
		return nil, err
	}
	digests := make([]string, len(m.Chunks))
	for i, c := range m.Chunks {
		digests[i] = c.Digest
	}
	l, at, err := s.startLease(ctx, fmt.Sprintf("read-%s-%s", m.ID, holder), leaseBody{Image: m.ID, Kind: "read", Chunks: digests})
	if err != nil {
		return nil, err
	}
	// Once no gc that missed the hold runs, an image still durable has all
	// its chunks, and keeps them.
	err = s.waitForGC(ctx, at)
	if err == nil {
		var durable bool
		if durable, err = s.Durable(ctx, m.ID); err == nil && !durable {
			err = fmt.Errorf("image %s was deleted: %w", m.ID, errdefs.ErrNotFound)
		}
	}
	if err != nil {
		l.release(ctx)
		return nil, err
	}
	return &Hold{l: l}, nil
}

// Release ends the hold.
func (h *Hold) Release(ctx context.Context) error { return h.l.release(ctx) }
