package imagestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zeish/zeish/internal/imagestore/blob"
)

// Garbage collection: mark and sweep, safe against crashes of either side
// and against uploads and reads running at the same time.
//
//   - A chunk is live while a manifest or an unexpired lease lists it. An
//     upload holds a lease listing every chunk its manifest will name (the
//     parent's from the start, its own as it stores them), renewed every
//     LeaseTTL/4 and deleted once the manifest is written; a node reading
//     an image lazily holds one listing the image's chunks while it serves
//     it. A holder that crashes stops renewing, and its lease expires.
//   - A gc run announces itself (gc/<run>), reads the leases, then the
//     manifests (an upload writes its manifest before it drops its lease,
//     so one of the two is seen), then deletes unlisted chunks older than
//     Grace. It deletes nothing once GCWindow has passed since it
//     announced itself.
//   - A run that read the leases before an upload's lease existed could
//     delete a chunk the upload finds present and means to reuse. So an
//     upload trusts a chunk it did not store itself only after its lease
//     names it and every run announced before that lease has ended
//     (waitForGC): later runs see the lease.
//   - Chunks an upload stores itself are new: Grace covers them until its
//     next renewal names them.
//
// Times are compared in the store's own clock (the objects' modification
// times) or as durations, never one host's clock against another's.

// slack covers the store's one-second modification times and a request's
// latency when times are compared.
const slack = 2 * time.Second

// leaseBody is what a lease object holds.
type leaseBody struct {
	Image  string   `json:"image"`
	Kind   string   `json:"kind"` // "upload" or "read"
	Chunks []string `json:"chunks"`
}

// putLease writes lease name and returns its modification time in the
// store's clock.
func (s *Store) putLease(ctx context.Context, name string, body leaseBody) (time.Time, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return time.Time{}, err
	}
	_, sum := digestOf(b)
	if err := s.b.Put(ctx, leaseKey(name), b, sum); err != nil {
		return time.Time{}, fmt.Errorf("lease %s: %w", name, err)
	}
	st, err := s.b.Stat(ctx, leaseKey(name))
	if err != nil {
		return time.Time{}, fmt.Errorf("lease %s: %w", name, err)
	}
	return st.ModTime, nil
}

// waitForGC returns once every gc run that announced itself before since
// (a time in the store's clock, a lease's modification time taken just
// now) has ended or passed its window.
func (s *Store) waitForGC(ctx context.Context, since time.Time) error {
	began := time.Now()
	for {
		var wait time.Duration
		err := s.b.List(ctx, gcPrefix, func(o blob.Info) error {
			// The run's window ends at ModTime+GCWindow in the store's clock,
			// which is began+(that-since) in ours.
			end := began.Add(o.ModTime.Add(s.opts.GCWindow + slack).Sub(since))
			wait = max(wait, time.Until(end))
			return nil
		})
		if err != nil {
			return fmt.Errorf("look for gc runs: %w", err)
		}
		if wait <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(wait, 250*time.Millisecond)):
		}
	}
}

// GCStats says what one gc run saw and did.
type GCStats struct {
	Manifests, Leases, ExpiredLeases int
	Chunks, LiveChunks, YoungChunks  int
	Deleted                          int
	DeletedBytes                     int64
}

// GC deletes the chunks no manifest and no live lease lists, once older
// than Grace, and the leases nobody renewed for LeaseTTL. Manifests are
// deleted by Delete only. A run stops deleting after GCWindow; what it did
// not reach, the next run does.
func (s *Store) GC(ctx context.Context) (st GCStats, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.GCWindow)
	defer cancel()
	run, now, end, err := s.announce(ctx, "run")
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	defer end()
	live := map[string]bool{}
	mark := func(digests []string) {
		for _, d := range digests {
			live[d] = true
		}
	}
	// Leases first, then manifests: see above.
	var leases []blob.Info
	if err := s.b.List(ctx, leasePrefix, func(o blob.Info) error { leases = append(leases, o); return nil }); err != nil {
		return st, fmt.Errorf("gc: list leases: %w", err)
	}
	for _, o := range leases {
		if now.Sub(o.ModTime) > s.opts.LeaseTTL {
			st.ExpiredLeases++
			if err := s.b.Delete(ctx, o.Key); err != nil {
				return st, fmt.Errorf("gc: %w", err)
			}
			continue
		}
		b, err := s.b.Get(ctx, o.Key, 0, -1)
		if errors.Is(err, blob.ErrNotFound) {
			continue // dropped after its manifest was written: the manifest is listed below
		}
		if err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		var l leaseBody
		if err := json.Unmarshal(b, &l); err != nil {
			// Without its list nothing can be known to be unused.
			return st, fmt.Errorf("gc: lease %s is not readable, deleting nothing: %w", o.Key, err)
		}
		st.Leases++
		mark(l.Chunks)
	}
	var manifests []string
	if err := s.b.List(ctx, manifestPrefix, func(o blob.Info) error { manifests = append(manifests, o.Key); return nil }); err != nil {
		return st, fmt.Errorf("gc: list manifests: %w", err)
	}
	for _, key := range manifests {
		b, err := s.b.Get(ctx, key, 0, -1)
		if errors.Is(err, blob.ErrNotFound) {
			continue // deleted since the list
		}
		if err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		id := strings.TrimSuffix(strings.TrimPrefix(key, manifestPrefix), manifestSuffix)
		m, err := decodeManifest(id, b)
		if err != nil {
			return st, fmt.Errorf("gc: deleting nothing: %w", err)
		}
		st.Manifests++
		for _, c := range m.Chunks {
			live[c.Digest] = true
		}
	}
	// Runs that crashed left their announcement: past two windows it is
	// stale.
	s.b.List(ctx, gcPrefix, func(o blob.Info) error {
		if o.Key != run && now.Sub(o.ModTime) > 2*s.opts.GCWindow+slack {
			s.b.Delete(ctx, o.Key)
		}
		return nil
	})
	var doomed []blob.Info
	err = s.b.List(ctx, chunkPrefix, func(o blob.Info) error {
		st.Chunks++
		switch d := digestOfKey(o.Key); {
		case live[d]:
			st.LiveChunks++
		case now.Sub(o.ModTime) <= s.opts.Grace:
			st.YoungChunks++
		default:
			doomed = append(doomed, o)
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("gc: list chunks: %w", err)
	}
	for _, o := range doomed {
		if err := s.b.Delete(ctx, o.Key); err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		st.Deleted++
		st.DeletedBytes += o.Size
		s.opts.Metrics.FreedBytes.Add(float64(o.Size))
	}
	s.log.Info("image store gc", "manifests", st.Manifests, "leases", st.Leases, "expired_leases", st.ExpiredLeases,
		"chunks", st.Chunks, "deleted", st.Deleted, "deleted_bytes", st.DeletedBytes)
	return st, nil
}

// announce says a gc run or a sweep (kind) is in progress until end, for
// waitForGC; ctx bounds the run (GCWindow). It returns the announcement's
// key and time, in the store's clock.
func (s *Store) announce(ctx context.Context, kind string) (key string, at time.Time, end func(), err error) {
	key = gcPrefix + kind + "-" + randomHex(8)
	if err := s.b.Put(ctx, key, []byte("{}"), sumOf([]byte("{}"))); err != nil {
		return "", time.Time{}, nil, fmt.Errorf("announce: %w", err)
	}
	end = func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		s.b.Delete(dctx, key)
	}
	info, err := s.b.Stat(ctx, key)
	if err != nil {
		end()
		return "", time.Time{}, nil, err
	}
	return key, info.ModTime, end, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func sumOf(b []byte) [32]byte {
	_, sum := digestOf(b)
	return sum
}
