package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// UploadSpec says what to store as image ID.
type UploadSpec struct {
	ID string
	// Parent is the image this one is a delta of ("" for none): pages equal
	// to the parent's at the same offset are stored as references to its
	// chunks. A parent that is not durable (not uploaded yet, or deleted)
	// makes a full upload.
	Parent string
	Files  []SourceFile
	Meta   json.RawMessage
}

// SourceFile is one local file of the image.
type SourceFile struct {
	Name string // its name in the image ("mem", "state", "disk")
	Path string
	// ParentPath is a local copy of the parent's file of the same name, if
	// the node has one (read instead of fetching the parent's chunks).
	ParentPath string
}

// Progress is how far an upload got.
type Progress struct {
	Planned    bool  // every file has been read and cut into chunks
	FileBytes  int64 // the files' lengths, read so far
	Chunks     int   // chunks of the image's own (not the parent's), so far
	ChunksDone int   // of those, stored or found in the store
	Bytes      int64 // the bytes of those chunks
	BytesDone  int64
	Uploaded   int64 // chunk bytes put into the store (what the store lacked)
	Manifest   int64 // the manifest's bytes, put last
	Shared     int64 // file bytes that are the parent's chunks: nothing to upload
}

// Upload is an upload running in the background.
type Upload struct {
	s    *Store
	spec UploadSpec
	done chan struct{}
	m    *Manifest
	err  error

	mu   sync.Mutex
	prog Progress
}

// StartUpload stores the files of spec as image spec.ID in the background:
// chunks first, the manifest last, so the image is durable (Durable) only
// once it is whole. Cancelling ctx stops it; a later upload of the same id
// resumes, storing only the chunks that are missing. The files must not
// change while it runs (an image's files never do).
func (s *Store) StartUpload(ctx context.Context, spec UploadSpec) *Upload {
	u := &Upload{s: s, spec: spec, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		u.m, u.err = u.run(ctx)
		if u.err != nil {
			u.err = fmt.Errorf("upload image %s to %s: %w", spec.ID, s, u.err)
		}
	}()
	return u
}

// Upload stores spec and waits for it.
func (s *Store) Upload(ctx context.Context, spec UploadSpec) (*Manifest, error) {
	return s.StartUpload(ctx, spec).Wait()
}

// Wait returns the image's manifest once it is durable.
func (u *Upload) Wait() (*Manifest, error) {
	<-u.done
	return u.m, u.err
}

// Done is closed when the upload has ended.
func (u *Upload) Done() <-chan struct{} { return u.done }

// Progress is a snapshot of how far it got.
func (u *Upload) Progress() Progress {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.prog
}

func (u *Upload) update(f func(*Progress)) {
	u.mu.Lock()
	f(&u.prog)
	u.mu.Unlock()
}

func (u *Upload) run(ctx context.Context) (*Manifest, error) {
	s, spec := u.s, u.spec
	if err := CheckID("image id", spec.ID); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(spec.Files) == 0 {
		return nil, fmt.Errorf("no files: %w", errdefs.ErrInvalidArgument)
	}
	for _, f := range spec.Files {
		if err := CheckID("file name", f.Name); err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	if m, err := s.Manifest(ctx, spec.ID); err == nil {
		return m, nil // durable already
	} else if !errors.Is(err, blob.ErrNotFound) {
		return nil, err
	}
	var parent *Manifest
	if spec.Parent != "" {
		m, err := s.Manifest(ctx, spec.Parent)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			s.log.Info("image store: parent not durable, uploading the whole image", "image", spec.ID, "parent", spec.Parent)
		case err != nil:
			return nil, err
		default:
			parent = m
		}
	}
	// The lease names the parent's chunks from the start, and each chunk
	// of ours once it is stored.
	var leased []string
	if parent != nil {
		for _, c := range parent.Chunks {
			leased = append(leased, c.Digest)
		}
	}
	l, at, err := s.startLease(ctx, "upload-"+spec.ID, leaseBody{Image: spec.ID, Kind: "upload", Chunks: leased})
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			l.release(ctx) // nothing of ours stays live because of it; gc takes the chunks later
		}
	}()
	if parent != nil {
		// Once no gc that missed the lease runs, a parent still durable has
		// all its chunks, and keeps them until we are done.
		if err := s.waitForGC(ctx, at); err != nil {
			return nil, err
		}
		if durable, err := s.Durable(ctx, parent.ID); err != nil {
			return nil, err
		} else if !durable {
			s.log.Info("image store: parent deleted meanwhile, uploading the whole image", "image", spec.ID, "parent", parent.ID)
			parent = nil
		}
	}
	m := &Manifest{Version: manifestVersion, ID: spec.ID, CreatedAt: time.Now().UTC(), Meta: spec.Meta}
	if parent != nil {
		m.Parent = parent.ID
	}
	p := newPlanner()
	srcs := make([]*os.File, len(spec.Files))
	parents := make([]*parentFile, len(spec.Files))
	defer func() {
		for _, f := range srcs {
			if f != nil {
				f.Close()
			}
		}
		for _, pf := range parents {
			if c, ok := pf.readerCloser(); ok {
				c.Close()
			}
		}
	}()
	for i, sf := range spec.Files {
		if srcs[i], err = os.Open(sf.Path); err != nil {
			return nil, err
		}
		if parents[i], err = s.parentFile(ctx, parent, sf); err != nil {
			return nil, err
		}
	}
	// Chunks found in the store rather than stored now: trusted only once
	// the lease names them and no gc that missed it runs (below).
	var foundMu sync.Mutex
	found := map[string]newChunk{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Parallel + 1)
	g.Go(func() error {
		for i, sf := range spec.Files {
			f, err := p.planFile(sf.Name, i, srcs[i], parents[i], func(c newChunk) error {
				u.update(func(pr *Progress) { pr.Chunks++; pr.Bytes += c.ref.Size })
				g.Go(func() error {
					present, err := s.storeChunk(gctx, c, nil)
					if err != nil {
						return err
					}
					l.add(c.ref.Digest)
					if present {
						foundMu.Lock()
						found[c.ref.Digest] = newChunk{ref: c.ref, file: c.file, window: c.window}
						foundMu.Unlock()
					} else {
						u.update(func(pr *Progress) { pr.Uploaded += c.ref.Size })
					}
					u.update(func(pr *Progress) { pr.ChunksDone++; pr.BytesDone += c.ref.Size })
					return nil
				})
				return nil
			})
			if err != nil {
				return err
			}
			m.Files = append(m.Files, f)
			u.update(func(pr *Progress) { pr.FileBytes += f.Size })
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	m.Chunks = p.chunks
	u.update(func(pr *Progress) {
		pr.Planned = true
		pr.Shared = sharedBytes(m, parent)
	})
	if len(found) > 0 {
		at, err := l.renew(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.waitForGC(ctx, at); err != nil {
			return nil, err
		}
		for _, c := range found {
			remake := func() ([]byte, error) { return remakeChunk(c, srcs[c.file], parents[c.file]) }
			if _, err := s.storeChunk(ctx, c, remake); err != nil {
				return nil, err
			}
		}
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, errdefs.ErrInternal)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := s.b.Put(ctx, manifestKey(m.ID), b, sumOf(b)); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	u.update(func(pr *Progress) { pr.Manifest = int64(len(b)) })
	ok = true
	if err := l.release(ctx); err != nil {
		s.log.Warn("image store: drop upload lease (it expires)", "image", m.ID, "err", err)
	}
	pr := u.Progress()
	s.opts.Metrics.UploadBytes.Add(float64(pr.Uploaded + pr.Manifest))
	return m, nil
}

// storeChunk makes sure chunk c is in the store, with the right length,
// and says whether it was there already. A chunk held without its bytes
// (one found in the store earlier, checked again) that is missing now is
// made again by remake.
func (s *Store) storeChunk(ctx context.Context, c newChunk, remake func() ([]byte, error)) (present bool, err error) {
	key := chunkKey(c.ref.Digest)
	st, err := s.b.Stat(ctx, key)
	if err == nil && st.Size == c.ref.Size {
		return true, nil
	}
	if err != nil && !errors.Is(err, blob.ErrNotFound) {
		return false, err
	}
	data := c.data
	if data == nil {
		if data, err = remake(); err != nil {
			return false, err
		}
	}
	_, sum := digestOf(data)
	if err := s.b.Put(ctx, key, data, sum); err != nil {
		return false, fmt.Errorf("chunk %s: %w", c.ref.Digest, err)
	}
	return false, nil
}

// remakeChunk cuts c's window of src again (against the same parent),
// which yields the same chunk unless the file changed.
func remakeChunk(c newChunk, src *os.File, parent *parentFile) ([]byte, error) {
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	spans, err := dataSpans(src, st.Size())
	if err != nil {
		return nil, err
	}
	_, fresh, err := newPlanner().window(src, st.Size(), spans, c.window, parent)
	if err != nil {
		return nil, err
	}
	if d, _ := digestOf(fresh); d != c.ref.Digest {
		return nil, fmt.Errorf("%s changed during the upload (window %d): %w", src.Name(), c.window, errdefs.ErrInvalidState)
	}
	return fresh, nil
}

// parentFile opens what a delta of sf is compared against: the parent's
// local copy, else its chunks through the store.
func (s *Store) parentFile(ctx context.Context, parent *Manifest, sf SourceFile) (*parentFile, error) {
	if parent == nil {
		return nil, nil
	}
	pf, ok := parent.File(sf.Name)
	if !ok {
		return nil, nil
	}
	var r io.ReaderAt
	if sf.ParentPath != "" {
		f, err := os.OpenFile(sf.ParentPath, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, fmt.Errorf("parent's %s: %w", sf.Name, err)
		}
		if st, err := f.Stat(); err != nil || st.Size() != pf.Size {
			f.Close()
			return nil, fmt.Errorf("parent's %s at %s is not the parent's file (%d bytes, the manifest says %d)", sf.Name, sf.ParentPath, st.Size(), pf.Size)
		}
		r = f
	} else {
		fr, err := s.Reader(ctx, parent, sf.Name, nil)
		if err != nil {
			return nil, err
		}
		r = fr
	}
	return &parentFile{m: parent, f: pf, r: r}, nil
}

// readerCloser is the parent's local file, to close when done.
func (pf *parentFile) readerCloser() (io.Closer, bool) {
	if pf == nil {
		return nil, false
	}
	c, ok := pf.r.(io.Closer)
	return c, ok
}

// sharedBytes is how much of m's files are the parent's chunks.
func sharedBytes(m, parent *Manifest) int64 {
	if parent == nil {
		return 0
	}
	theirs := map[string]bool{}
	for _, c := range parent.Chunks {
		theirs[c.Digest] = true
	}
	var n int64
	for _, f := range m.Files {
		for _, e := range f.Extents {
			if theirs[m.Chunks[e.Chunk].Digest] {
				n += e.Len
			}
		}
	}
	return n
}
