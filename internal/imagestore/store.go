// Package imagestore keeps VM images (RAM, device state, disk layers) in an
// object store that every node of a cluster shares, so an image captured on
// one host can start on another. Files are cut into content-addressed
// chunks (SHA-256), holes and zero pages skipped; an image's manifest lists
// its files' extents and the chunks they point into, and is written last,
// so an image is durable exactly when its manifest exists. A child image
// is stored as its parent's chunks plus chunks of the pages it changed, so
// a re-fork uploads about what it wrote. Every chunk is checked against its
// digest when it is stored and when it is read back. Nodes read chunks into
// a local cache with an LRU bound; a lazily read file (imagefs) is served
// from it. Garbage collection is mark and sweep from the manifests and the
// leases of uploads and readers in flight (gc.go). docs/images.md says how
// it all fits.
package imagestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
	"github.com/zeish/zeish/internal/imagestore/blob/s3"
)

// Options tune a Store. Zero values pick the defaults.
type Options struct {
	// Cache is where fetched chunks are kept (nil: none; reads go to the
	// store every time).
	Cache *Cache
	// Parallel is how many requests a fetch or an upload keeps in flight
	// (default 8).
	Parallel int
	// RangeSize splits a chunk read into parallel ranged reads of this size
	// (default 512 KiB; a 2 MiB chunk is read as four).
	RangeSize int64
	// Grace is how old an unreferenced chunk must be before gc removes it
	// (default 1 h): it covers uploads whose lease does not name the chunk
	// yet, and clock skew.
	Grace time.Duration
	// LeaseTTL is how long a lease nobody renews keeps its chunks (default
	// 1 h; holders renew every LeaseTTL/4).
	LeaseTTL time.Duration
	// GCWindow bounds one gc run: it deletes nothing once this long has
	// passed since it announced itself (default 30 s), so an upload that
	// waits that long knows no gc that missed its lease is still deleting.
	GCWindow time.Duration
	// SweepGrace is how old an image's manifest must be before a sweep may
	// delete it, and how long a node's claim counts without renewal
	// (default 1 h; sweep.go says why it must exceed ClaimEvery by far).
	SweepGrace time.Duration
	// ClaimEvery is how often a node renews its claim (default 1 min).
	ClaimEvery time.Duration
	// Needs says which images image m's files stand on (a disk layer's
	// backing chain), read from its Meta; a sweep keeps them with it.
	Needs   func(m *Manifest) ([]string, error)
	Metrics *Metrics
	Logger  *slog.Logger
}

// Store is an image store on a blob backend.
type Store struct {
	b      blob.Backend
	flight singleflight.Group // one fetch per chunk at a time
	// needsOf caches Options.Needs by image id (manifests never change).
	needsOf sync.Map
	opts    Options
	log     *slog.Logger
}

// New makes a Store on b.
func New(b blob.Backend, o Options) *Store {
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.RangeSize <= 0 {
		o.RangeSize = 512 << 10
	}
	if o.Grace <= 0 {
		o.Grace = time.Hour
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = time.Hour
	}
	if o.GCWindow <= 0 {
		o.GCWindow = 30 * time.Second
	}
	if o.SweepGrace <= 0 {
		o.SweepGrace = time.Hour
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = time.Minute
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Store{b: b, opts: o, log: o.Logger}
}

// ClaimEvery is how often a node renews its claim (Claim).
func (s *Store) ClaimEvery() time.Duration { return s.opts.ClaimEvery }

// Backend is the blob backend the store keeps its objects in.
func (s *Store) Backend() blob.Backend { return s.b }

// Metrics are the store's instruments.
func (s *Store) Metrics() *Metrics { return s.opts.Metrics }

func (s *Store) String() string { return s.b.String() }

// OpenBackend makes the backend ZEISH_IMAGE_STORE names (NewBackend) and
// checks it (Check), so a misconfiguration fails clearly.
func OpenBackend(ctx context.Context, raw string) (blob.Backend, error) {
	b, err := NewBackend(raw)
	if err != nil {
		return nil, err
	}
	if err := Check(ctx, b); err != nil {
		return nil, err
	}
	return b, nil
}

// NewBackend makes the backend ZEISH_IMAGE_STORE names:
// s3://bucket/prefix?endpoint=…&region=…, or file:///path (or an absolute
// path) for a folder. An S3 backend is made without touching the network.
func NewBackend(raw string) (blob.Backend, error) {
	switch {
	case strings.HasPrefix(raw, "s3://"):
		cfg, err := s3.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		b, err := s3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
		return b, nil
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || u.Path == "" || u.Host != "" {
			return nil, fmt.Errorf("image store %q: want file:///absolute/path: %w", raw, errdefs.ErrInvalidArgument)
		}
		return folder.New(u.Path)
	case strings.HasPrefix(raw, "/"):
		return folder.New(raw)
	}
	return nil, fmt.Errorf("image store %q: want s3://bucket/prefix?endpoint=… or file:///path: %w", raw, errdefs.ErrInvalidArgument)
}

// Check makes one request of b that needs its bucket and its credentials
// (an S3 backend; a folder has nothing to check): blob.ErrAccessDenied for
// keys it refuses, blob.ErrNotFound for a missing bucket,
// blob.ErrUnreachable for a store that does not answer.
func Check(ctx context.Context, b blob.Backend) error {
	if c, ok := b.(interface{ Check(context.Context) error }); ok {
		return c.Check(ctx)
	}
	return nil
}

// Manifest reads image id's manifest: ErrNotFound (errdefs.ErrNotFound)
// when the image is not (or not yet) durable.
func (s *Store) Manifest(ctx context.Context, id string) (*Manifest, error) {
	if err := CheckID("image id", id); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	b, err := s.b.Get(ctx, manifestKey(id), 0, -1)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	return decodeManifest(id, b)
}

func decodeManifest(id string, b []byte) (*Manifest, error) {
	m := new(Manifest)
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w (%w)", id, err, errdefs.ErrInternal)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, errdefs.ErrInternal)
	}
	if m.ID != id {
		return nil, fmt.Errorf("image %s: manifest names image %s (%w)", id, m.ID, errdefs.ErrInternal)
	}
	return m, nil
}

// Durable says whether image id is whole in the store (its manifest, which
// is written last, exists).
func (s *Store) Durable(ctx context.Context, id string) (bool, error) {
	if err := CheckID("image id", id); err != nil {
		return false, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	_, err := s.b.Stat(ctx, manifestKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Images lists the ids of the durable images.
func (s *Store) Images(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.b.List(ctx, manifestPrefix, func(o blob.Info) error {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, manifestPrefix), manifestSuffix); ok {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// Delete removes image id: its manifest goes now; chunks no other manifest
// or lease uses go at a later gc. The caller deletes an image only once
// nothing refers to it (the control plane derives that, as a node's image
// gc does from its records); readers holding a lease on it keep its chunks.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := CheckID("image id", id); err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return s.b.Delete(ctx, manifestKey(id))
}
