package lazyram

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// prefetchLocked starts s's prefetch unless one runs. r.mu is held.
//
// The order: first the chunks the node's reads of the image touched so far
// (the guest's first faults, which it will touch again), then the rest in
// file order. Replaying what a VM of the image touched first is what
// measured best (docs/images.md: a cold start with the list replayed beat
// the warm cache); a node that starts an image for the first time knows
// only what its own VM touched by then.
func (r *RAM) prefetchLocked(s *served) {
	select {
	case <-s.done:
	default:
		return // running
	}
	if r.sess == nil || r.life.Err() != nil {
		return
	}
	sess := r.sess
	ctx, cancel := context.WithCancel(r.life)
	s.cancel, s.done = cancel, make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(s.done)
		r.prefetch(ctx, sess, s)
	}()
}

// prefetchParallel is how many chunks the prefetch reads at once (a
// guest's faults read with the store's default, 8).
const prefetchParallel = 2

func (r *RAM) prefetch(ctx context.Context, sess *session, s *served) {
	id := s.Manifest.ID
	began := time.Now()
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		order := sess.srv.Touched(id)
		if f, ok := s.Manifest.File(s.Name); ok {
			for _, e := range f.Extents {
				order = append(order, e.Chunk) // Prefetch skips what the cache has
			}
		}
		err := sess.background.Prefetch(ctx, s.Manifest, order)
		if err == nil {
			err = r.materialize(ctx, sess, s)
		}
		if err == nil {
			took := time.Since(began)
			r.metrics.Prefetches.WithLabelValues("done").Inc()
			r.metrics.PrefetchSeconds.Observe(took.Seconds())
			r.log.Info("lazy RAM: image RAM prefetched, now local", "image", id, "file", s.Local, "seconds", took.Seconds())
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.metrics.Prefetches.WithLabelValues("retried").Inc()
		r.log.Warn("lazy RAM: prefetch failed, retrying (the guest's faults are served meanwhile)", "image", id, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// materialize writes s's file out whole (from the chunk cache, which the
// prefetch filled) and swaps it in for the symlink, atomically: if the
// symlink is gone meanwhile (the image was collected), the copy is dropped
// rather than left in tmpfs with nothing naming it.
func (r *RAM) materialize(ctx context.Context, sess *session, s *served) error {
	if !r.isLink(s) {
		if _, err := os.Lstat(s.Local); err == nil {
			s.localAt.CompareAndSwap(0, time.Now().UnixNano())
		}
		return nil
	}
	tmp := s.Local + ".lazy-fetch"
	os.Remove(tmp)
	if err := sess.background.FetchFile(ctx, s.Manifest, s.Name, tmp); err != nil {
		return err
	}
	defer os.Remove(tmp) // after the exchange: the symlink
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, s.Local, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		return nil // collected meanwhile
	}
	if err != nil {
		return err
	}
	s.localAt.Store(time.Now().UnixNano())
	return nil
}

func (r *RAM) sweepEvery() {
	defer r.wg.Done()
	t := time.NewTicker(r.o.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-r.life.Done():
			return
		case <-t.C:
			r.sweep(r.life, r.o.Grace)
		}
	}
}

// sweep retires the images no process maps that are local now (for
// grace) or gone (collected), and unmounts once none is served.
func (r *RAM) sweep(ctx context.Context, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil && len(r.served) == 0 {
		return // nothing mounted: no /proc scan
	}
	mapped := Mapped(r.Mount())
	now := time.Now()
	for id, s := range r.served {
		_, err := os.Lstat(s.Local)
		gone, link := err != nil, r.isLink(s)
		if !gone && !link {
			s.localAt.CompareAndSwap(0, now.UnixNano()) // made local by an earlier zeishd
		}
		if mapped[r.fusePath(s)] {
			continue
		}
		if !gone && (link || now.Sub(time.Unix(0, s.localAt.Load())) < grace) {
			continue
		}
		if s.cancel != nil {
			s.cancel()
		}
		<-s.done
		if r.sess != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := r.sess.srv.Remove(rctx, id); err != nil {
				r.log.Warn("lazy RAM: retire an image", "image", id, "err", err)
			}
			cancel()
		}
		os.Remove(r.servedFile(id))
		delete(r.served, id)
		r.metrics.Images.Set(float64(len(r.served)))
		r.log.Info("lazy RAM: image retired (no VM maps its served RAM)", "image", id, "local", !gone)
	}
	if len(r.served) == 0 && r.sess != nil {
		r.teardownLocked()
	}
}
