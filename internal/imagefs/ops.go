package imagefs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// dispatch answers one request. Images are read-only: anything that would
// change the tree or a file is EROFS; what we do not know is ENOSYS (the
// kernel then stops asking).
func (c *conn) dispatch(ctx context.Context, h inHeader, in []byte) {
	var out []byte
	var errno syscall.Errno
	switch h.Opcode {
	case opForget, opBatchForget, opInterrupt:
		return // no answer: node ids are fixed, reads are not cancelled
	case opLookup:
		out, errno = c.lookup(h.NodeID, in)
	case opGetattr:
		var a attr
		if a, errno = c.attrOf(h.NodeID); errno == 0 {
			out = attrOut(a)
		}
	case opOpen, opOpendir:
		if _, errno = c.attrOf(h.NodeID); errno == 0 {
			out = openOut(h.NodeID, fopenKeepCache|fopenNoFlush)
		}
	case opRelease, opReleasedir, opFlush:
	case opRead:
		out, errno = c.read(ctx, h.NodeID, in)
	case opReaddir:
		out, errno = c.readdir(h.NodeID, in)
	case opLseek:
		out, errno = c.lseek(h.NodeID, in)
	case opStatfs:
		out = make([]byte, kstatfsSize)
		le.PutUint32(out[40:], 4096) // bsize
		le.PutUint32(out[44:], 255)  // namelen
		le.PutUint32(out[48:], 4096) // frsize
	case opAccess:
	case opSetattr, opWrite, opCreate:
		errno = syscall.EROFS
	default:
		errno = syscall.ENOSYS
	}
	if err := c.write(reply(h.Unique, errno, out)); err != nil && !errors.Is(err, syscall.ENOENT) {
		// ENOENT: the request was interrupted and withdrawn meanwhile.
		c.s.log.Warn("imagefs: reply", "opcode", h.Opcode, "err", err)
	}
}

// node finds what id names: the root, an image's folder or one of its
// files (image and k >= 0).
func (c *conn) node(id uint64) (im *image, k int, ok bool) {
	if id == rootID {
		return nil, -1, true
	}
	seq, k := splitNode(id)
	c.s.mu.Lock()
	im = c.s.bySeq[seq]
	c.s.mu.Unlock()
	if im == nil || k >= len(im.m.Files) {
		return nil, 0, false
	}
	return im, k, true
}

func (c *conn) attrOf(id uint64) (attr, syscall.Errno) {
	im, k, ok := c.node(id)
	switch {
	case !ok:
		return attr{}, syscall.ENOENT
	case im == nil:
		return attr{ino: rootID, mode: syscall.S_IFDIR | 0o555, nlink: 2}, 0
	case k < 0:
		return attr{ino: id, mode: syscall.S_IFDIR | 0o555, nlink: 2, mtime: uint64(im.m.CreatedAt.Unix())}, 0
	}
	f := im.m.Files[k]
	var blocks uint64
	for _, e := range f.Extents {
		blocks += uint64(e.Len+511) / 512
	}
	return attr{ino: id, size: uint64(f.Size), blocks: blocks, mode: syscall.S_IFREG | 0o444, nlink: 1,
		mtime: uint64(im.m.CreatedAt.Unix())}, 0
}

func (c *conn) lookup(parent uint64, in []byte) ([]byte, syscall.Errno) {
	name := string(bytes.TrimRight(in, "\x00"))
	im, k, ok := c.node(parent)
	if !ok || (im != nil && k >= 0) {
		return nil, syscall.ENOTDIR
	}
	var id uint64
	if im == nil {
		c.s.mu.Lock()
		found := c.s.byID[name]
		c.s.mu.Unlock()
		if found == nil {
			return nil, syscall.ENOENT
		}
		id = dirNode(found.seq)
	} else {
		for i, f := range im.m.Files {
			if f.Name == name {
				id = fileNode(im.seq, i)
			}
		}
		if id == 0 {
			return nil, syscall.ENOENT
		}
	}
	a, errno := c.attrOf(id)
	if errno != 0 {
		return nil, errno
	}
	return entryOut(a), 0
}

func (c *conn) readdir(id uint64, in []byte) ([]byte, syscall.Errno) {
	if len(in) < 16 {
		return nil, syscall.EINVAL
	}
	off, size := le.Uint64(in[8:]), le.Uint32(in[16:])
	im, k, ok := c.node(id)
	if !ok || (im != nil && k >= 0) {
		return nil, syscall.ENOTDIR
	}
	type entry struct {
		ino  uint64
		typ  uint32
		name string
	}
	entries := []entry{{id, syscall.DT_DIR, "."}, {rootID, syscall.DT_DIR, ".."}}
	if im == nil {
		for _, x := range c.s.images() {
			entries = append(entries, entry{dirNode(x.seq), syscall.DT_DIR, x.m.ID})
		}
	} else {
		for i, f := range im.m.Files {
			entries = append(entries, entry{fileNode(im.seq, i), syscall.DT_REG, f.Name})
		}
	}
	var out []byte
	for i := off; i < uint64(len(entries)); i++ {
		e := entries[i]
		next := dirent(out, e.ino, i+1, e.typ, e.name)
		if len(next) > int(size) {
			break
		}
		out = next
	}
	return out, 0
}

// read serves a file's bytes. A store that cannot be reached is retried
// for a while before the read fails: a VM whose fault fails gets SIGBUS.
func (c *conn) read(ctx context.Context, id uint64, in []byte) ([]byte, syscall.Errno) {
	if len(in) < 24 {
		return nil, syscall.EINVAL
	}
	off, size := int64(le.Uint64(in[8:])), le.Uint32(in[16:])
	im, k, ok := c.node(id)
	if !ok || im == nil || k < 0 {
		return nil, syscall.EISDIR
	}
	r := im.readers[k]
	if off >= r.Size() {
		return nil, 0
	}
	buf := make([]byte, min(int64(size), r.Size()-off))
	deadline := time.Now().Add(readRetryFor)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		_, err := r.ReadAt(buf, off)
		if err == nil || errors.Is(err, io.EOF) {
			return buf, 0
		}
		if !errors.Is(err, blob.ErrUnreachable) || time.Now().After(deadline) || ctx.Err() != nil {
			c.s.log.Error("imagefs: read failed", "image", im.m.ID, "file", im.m.Files[k].Name, "off", off, "err", err)
			if errors.Is(err, errdefs.ErrStorageFull) {
				return nil, syscall.ENOSPC
			}
			return nil, syscall.EIO
		}
		c.s.log.Warn("imagefs: store unreachable, retrying a read", "image", im.m.ID, "err", err)
		time.Sleep(delay)
	}
}

// readRetryFor is how long a read waits out an unreachable store.
const readRetryFor = 2 * time.Minute

// lseek answers SEEK_DATA and SEEK_HOLE from the extents, so copying a
// file out of the folder keeps its holes.
func (c *conn) lseek(id uint64, in []byte) ([]byte, syscall.Errno) {
	if len(in) < 20 {
		return nil, syscall.EINVAL
	}
	off, whence := int64(le.Uint64(in[8:])), le.Uint32(in[16:])
	im, k, ok := c.node(id)
	if !ok || im == nil || k < 0 {
		return nil, syscall.EISDIR
	}
	f := im.m.Files[k]
	if off < 0 || off >= f.Size {
		return nil, syscall.ENXIO
	}
	res := int64(-1)
	switch whence {
	case 3: // SEEK_DATA
		for _, e := range f.Extents {
			if e.Off+e.Len > off {
				res = max(e.Off, off)
				break
			}
		}
		if res < 0 {
			return nil, syscall.ENXIO
		}
	case 4: // SEEK_HOLE
		res = off
		for _, e := range f.Extents {
			if e.Off > res {
				break
			}
			res = max(res, e.Off+e.Len)
		}
		res = min(res, f.Size)
	default:
		return nil, syscall.EINVAL
	}
	out := make([]byte, 8)
	le.PutUint64(out, uint64(res))
	return out, 0
}
