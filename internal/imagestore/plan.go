package imagestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const (
	pageSize = 4096
	// WindowSize is the span of a file one chunk covers: a chunk holds the
	// non-zero pages of one aligned window that the image does not share
	// with its parent, packed. 2 MiB keeps a miss of a lazily read RAM file
	// short (one request) while a 256 MiB image is ~128 objects, not 65,536.
	WindowSize = 2 << 20
)

var zeroPage = make([]byte, pageSize)

// span is a run of bytes of a file, [Off, Off+Len).
type span struct{ Off, Len int64 }

// dataSpans lists where f holds data (SEEK_DATA/SEEK_HOLE): what is not
// listed is a hole and reads as zeros.
func dataSpans(f *os.File, size int64) ([]span, error) {
	var out []span
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		hole = min(hole, size)
		if hole > data {
			out = append(out, span{data, hole - data})
		}
		off = hole
	}
	return out, nil
}

// parentFile is the same file of the image a new one is a delta of: its
// manifest entry and a reader of its bytes.
type parentFile struct {
	m *Manifest
	f *File
	r io.ReaderAt
}

// planner builds a manifest from local files, window by window, handing
// the chunks that must be stored to emit.
type planner struct {
	chunks []ChunkRef
	index  map[string]int // digest → index in chunks
}

func newPlanner() *planner { return &planner{index: map[string]int{}} }

// ref returns the manifest's index of a chunk, adding it when new.
func (p *planner) ref(digest string, size int64) int {
	if i, ok := p.index[digest]; ok {
		return i
	}
	p.chunks = append(p.chunks, ChunkRef{Digest: digest, Size: size})
	p.index[digest] = len(p.chunks) - 1
	return len(p.chunks) - 1
}

// newChunk is a chunk a window produced: its bytes, and the window, so it
// can be made again.
type newChunk struct {
	ref    ChunkRef
	data   []byte
	file   int
	window int64
}

// extentList appends page-sized pieces, merging a piece into the last
// extent when it continues it in both the file and the chunk.
type extentList []Extent

func (l *extentList) add(e Extent) {
	if n := len(*l); n > 0 {
		last := &(*l)[n-1]
		if last.Chunk == e.Chunk && last.Off+last.Len == e.Off && last.At+last.Len == e.At {
			last.Len += e.Len
			return
		}
	}
	*l = append(*l, e)
}

// window reads window w of src (size bytes in all, data where spans say)
// and splits its non-zero pages into those parent already holds, byte for
// byte at the same offset, and new ones, packed into one chunk. It returns
// the window's extents and its new chunk (nil data when there is none).
// The extents of the new chunk carry Chunk -1 until the caller knows its
// index.
func (p *planner) window(src io.ReaderAt, size int64, spans []span, w int64, parent *parentFile) ([]Extent, []byte, error) {
	n := min(int64(WindowSize), size-w)
	buf := make([]byte, n)
	for _, s := range spans {
		lo, hi := max(s.Off, w), min(s.Off+s.Len, w+n)
		if lo >= hi {
			continue
		}
		if _, err := src.ReadAt(buf[lo-w:hi-w], lo); err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
	}
	var pbuf []byte
	pi := 0 // parent extent cursor
	if parent != nil {
		pi = parent.f.find(w)
		if pi < len(parent.f.Extents) && parent.f.Extents[pi].Off < w+n {
			pbuf = make([]byte, n)
			if _, err := parent.r.ReadAt(pbuf, w); err != nil && !errors.Is(err, io.EOF) {
				return nil, nil, fmt.Errorf("read the parent image %s: %w", parent.m.ID, err)
			}
		}
	}
	var ext extentList
	var fresh []byte
	for at := int64(0); at < n; at += pageSize {
		page := buf[at:min(at+pageSize, n)]
		if bytes.Equal(page, zeroPage[:len(page)]) {
			continue
		}
		off := w + at
		if pbuf != nil {
			for pi < len(parent.f.Extents) && parent.f.Extents[pi].Off+parent.f.Extents[pi].Len <= off {
				pi++
			}
			if pi < len(parent.f.Extents) {
				pe := parent.f.Extents[pi]
				if pe.Off <= off && off+int64(len(page)) <= pe.Off+pe.Len && bytes.Equal(page, pbuf[at:at+int64(len(page))]) {
					c := parent.m.Chunks[pe.Chunk]
					ext.add(Extent{Off: off, Len: int64(len(page)), Chunk: p.ref(c.Digest, c.Size), At: pe.At + off - pe.Off})
					continue
				}
			}
		}
		ext.add(Extent{Off: off, Len: int64(len(page)), Chunk: -1, At: int64(len(fresh))})
		fresh = append(fresh, page...)
	}
	return ext, fresh, nil
}

// digestOf is the hex SHA-256 that names a chunk.
func digestOf(b []byte) (string, [sha256.Size]byte) {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), sum
}

// planFile builds file number fileIdx's manifest entry, calling emit with
// each window's new chunk (which the manifest then references) in order.
func (p *planner) planFile(name string, fileIdx int, src *os.File, parent *parentFile, emit func(newChunk) error) (File, error) {
	st, err := src.Stat()
	if err != nil {
		return File{}, err
	}
	size := st.Size()
	spans, err := dataSpans(src, size)
	if err != nil {
		return File{}, fmt.Errorf("%s: find its data: %w", name, err)
	}
	f := File{Name: name, Size: size}
	for _, w := range windowsOf(spans) {
		ext, fresh, err := p.window(src, size, spans, w, parent)
		if err != nil {
			return File{}, fmt.Errorf("%s at %d: %w", name, w, err)
		}
		if len(fresh) > 0 {
			digest, _ := digestOf(fresh)
			idx := p.ref(digest, int64(len(fresh)))
			for i := range ext {
				if ext[i].Chunk == -1 {
					ext[i].Chunk = idx
				}
			}
			if err := emit(newChunk{ref: p.chunks[idx], data: fresh, file: fileIdx, window: w}); err != nil {
				return File{}, err
			}
		}
		f.Extents = append(f.Extents, ext...)
	}
	return f, nil
}

// windowsOf lists the aligned windows that hold any data, in order.
func windowsOf(spans []span) []int64 {
	var out []int64
	for _, s := range spans {
		for w := s.Off / WindowSize * WindowSize; w < s.Off+s.Len; w += WindowSize {
			if len(out) == 0 || out[len(out)-1] < w {
				out = append(out, w)
			}
		}
	}
	return out
}
