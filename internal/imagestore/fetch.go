package imagestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// ErrCorrupt says a chunk read from the store is not what its digest
// names (damaged, truncated or replaced behind the store's back). Such a
// chunk is never cached nor used.
var ErrCorrupt = errors.New("chunk does not match its digest")

// fetchChunk reads a chunk from the store, in parallel ranged reads when
// it is large, and verifies it: its length, then its digest.
func (s *Store) fetchChunk(ctx context.Context, ref ChunkRef) ([]byte, error) {
	// One read per chunk however many want it; the read is not any one
	// caller's, so a caller that gives up does not fail the others (each
	// request is bounded by the backend's own timeout).
	ch := s.flight.DoChan(ref.Digest, func() (any, error) {
		return s.fetchChunkOnce(context.WithoutCancel(ctx), ref)
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]byte), nil
	}
}

func (s *Store) fetchChunkOnce(ctx context.Context, ref ChunkRef) ([]byte, error) {
	began := time.Now()
	data, err := s.readRanges(ctx, chunkKey(ref.Digest), ref.Size)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("chunk %s: %d bytes in the store, want %d: %w (%w)", ref.Digest, len(data), ref.Size, ErrCorrupt, errdefs.ErrInternal)
	}
	if d, _ := digestOf(data); d != ref.Digest {
		return nil, fmt.Errorf("chunk %s: its bytes hash to %s: %w (%w)", ref.Digest, d, ErrCorrupt, errdefs.ErrInternal)
	}
	s.opts.Metrics.FetchBytes.Add(float64(len(data)))
	s.opts.Metrics.FetchSeconds.WithLabelValues("chunk").Observe(time.Since(began).Seconds())
	return data, nil
}

// readRanges reads key, expected to be size bytes long, in RangeSize
// pieces fetched in parallel. It asks for one byte past size, so the caller
// sees an object that grew as surely as one that shrank.
func (s *Store) readRanges(ctx context.Context, key string, size int64) ([]byte, error) {
	n := max((size+s.opts.RangeSize-1)/s.opts.RangeSize, 1)
	parts := make([][]byte, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for i := range n {
		g.Go(func() error {
			off := i * s.opts.RangeSize
			want := min(s.opts.RangeSize, size-off)
			if i == n-1 {
				want++
			}
			b, err := s.b.Get(gctx, key, off, want)
			parts[i] = b
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, size+1)
	for i, b := range parts {
		out = append(out, b...)
		if int64(i) < n-1 && int64(len(b)) < s.opts.RangeSize {
			break // short: the object ends here
		}
	}
	return out, nil
}

// chunkReader gives the bytes of a chunk: from the cache, or fetched
// (and then cached). release must be called when done.
func (s *Store) chunkReader(ctx context.Context, ref ChunkRef) (io.ReaderAt, func(), error) {
	if c := s.opts.Cache; c != nil {
		if h, ok := c.acquire(ref.Digest, ref.Size); ok {
			s.opts.Metrics.CacheHits.Inc()
			return h, h.release, nil
		}
		s.opts.Metrics.CacheMisses.Inc()
	}
	data, err := s.fetchChunk(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if c := s.opts.Cache; c != nil {
		if err := c.put(ref.Digest, data); err != nil {
			// The bytes are good: serve them from memory, uncached.
			s.log.Warn("chunk cache: could not keep a chunk", "chunk", ref.Digest, "err", err)
		}
	}
	return byteReader(data), func() {}, nil
}

type byteReader []byte

func (b byteReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// FileReader reads one file of an image lazily: each chunk from the cache,
// or the store on a miss. Holes read as zeros.
type FileReader struct {
	s    *Store
	ctx  context.Context
	m    *Manifest
	f    *File
	seen func(chunk int) // called with each chunk a read touched
}

// Reader reads file name of m. ctx bounds every store read it makes.
// seen, if set, is told each chunk index a read touches (a prefetch list
// is recorded that way).
func (s *Store) Reader(ctx context.Context, m *Manifest, name string, seen func(chunk int)) (*FileReader, error) {
	f, ok := m.File(name)
	if !ok {
		return nil, fmt.Errorf("image %s has no file %q: %w", m.ID, name, errdefs.ErrNotFound)
	}
	return &FileReader{s: s, ctx: ctx, m: m, f: f, seen: seen}, nil
}

// Size is the file's length.
func (r *FileReader) Size() int64 { return r.f.Size }

// ReadAt fills p with the file's bytes from off.
func (r *FileReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.f.Size {
		return 0, io.EOF
	}
	want := p
	if rest := r.f.Size - off; int64(len(want)) > rest {
		want = want[:rest]
	}
	clear(want)
	end := off + int64(len(want))
	for i := r.f.find(off); i < len(r.f.Extents) && r.f.Extents[i].Off < end; i++ {
		e := r.f.Extents[i]
		lo, hi := max(e.Off, off), min(e.Off+e.Len, end)
		ref := r.m.Chunks[e.Chunk]
		if r.seen != nil {
			r.seen(e.Chunk)
		}
		cr, release, err := r.s.chunkReader(r.ctx, ref)
		if err != nil {
			return 0, err
		}
		_, err = cr.ReadAt(want[lo-off:hi-off], e.At+lo-e.Off)
		release()
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(want), nil
}

// Prefetch puts the chunks of m with the given indexes into the cache,
// in parallel (a recorded list of what an earlier reader touched first).
func (s *Store) Prefetch(ctx context.Context, m *Manifest, chunks []int) error {
	if s.opts.Cache == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for _, i := range chunks {
		if i < 0 || i >= len(m.Chunks) {
			continue
		}
		ref := m.Chunks[i]
		if s.opts.Cache.Has(ref.Digest) {
			continue
		}
		g.Go(func() error {
			_, release, err := s.chunkReader(gctx, ref)
			if err == nil {
				release()
			}
			return err
		})
	}
	return g.Wait()
}

// FetchFile writes file name of image m to dst, holes kept, chunks read in
// parallel (from the cache where it has them; the file itself is the
// local copy, so fetched chunks are not cached again). dst appears whole
// or not at all: the bytes go to a temporary file renamed at the end. A
// full disk is a storage_full error, and nothing is left behind.
func (s *Store) FetchFile(ctx context.Context, m *Manifest, name, dst string) (err error) {
	f, ok := m.File(name)
	if !ok {
		return fmt.Errorf("image %s has no file %q: %w", m.ID, name, errdefs.ErrNotFound)
	}
	began := time.Now()
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".fetch-")
	if err != nil {
		return fetchIOError(dst, err)
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	if err := out.Truncate(f.Size); err != nil {
		return fetchIOError(dst, err)
	}
	// Extents by chunk, so each chunk is read once.
	byChunk := map[int][]Extent{}
	var order []int
	for _, e := range f.Extents {
		if _, ok := byChunk[e.Chunk]; !ok {
			order = append(order, e.Chunk)
		}
		byChunk[e.Chunk] = append(byChunk[e.Chunk], e)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel)
	for _, ci := range order {
		g.Go(func() error {
			ref := m.Chunks[ci]
			var data io.ReaderAt
			release := func() {}
			if c := s.opts.Cache; c != nil {
				if h, ok := c.acquire(ref.Digest, ref.Size); ok {
					data, release = h, h.release
				}
			}
			if data == nil {
				b, err := s.fetchChunk(gctx, ref)
				if err != nil {
					return err
				}
				data = byteReader(b)
			}
			defer release()
			for _, e := range byChunk[ci] {
				buf := make([]byte, e.Len)
				if _, err := data.ReadAt(buf, e.At); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				if _, err := out.WriteAt(buf, e.Off); err != nil {
					return fetchIOError(dst, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("fetch %s of image %s: %w", name, m.ID, err)
	}
	if err := out.Sync(); err != nil {
		return fetchIOError(dst, err)
	}
	if err := out.Close(); err != nil {
		return fetchIOError(dst, err)
	}
	if err := os.Rename(out.Name(), dst); err != nil {
		return fetchIOError(dst, err)
	}
	s.opts.Metrics.FetchSeconds.WithLabelValues("file").Observe(time.Since(began).Seconds())
	return nil
}

func fetchIOError(dst string, err error) error {
	// The message reaches clients (a start's state_reason): it names the
	// file, not the node's paths.
	if errors.Is(err, syscall.ENOSPC) {
		return blob.Errorf(blob.ErrFull, "fetch of %s: the disk is full on its node (%v)", filepath.Base(dst), syscall.ENOSPC)
	}
	if errors.Is(err, syscall.EDQUOT) {
		return blob.Errorf(blob.ErrFull, "fetch of %s: the disk is full on its node (%v)", filepath.Base(dst), syscall.EDQUOT)
	}
	return fmt.Errorf("fetch into %s: %w", dst, err)
}
