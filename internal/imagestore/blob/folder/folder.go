// Package folder is the blob backend that keeps objects as files under one
// folder: a key "chunks/ab/cd…" is the file <root>/chunks/ab/cd…. A put is
// written to a temporary file, synced and renamed over the key, so a crash
// leaves the old object or the new one, whole. It suits one host, or hosts
// that share a filesystem.
package folder

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// tempMark is in the name of a put still being written (datadir.WriteFile).
const tempMark = ".tmp-"

// Backend stores objects in a folder.
type Backend struct{ root string }

var _ blob.Backend = (*Backend)(nil)

// New uses root, creating it if needed.
func New(root string) (*Backend, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, blob.Errorf(blob.ErrUnreachable, "image store folder %s: %v", abs, err)
	}
	return &Backend{root: abs}, nil
}

func (b *Backend) String() string { return "folder " + b.root }

// Root is the folder the objects live in.
func (b *Backend) Root() string { return b.root }

// Path is the file that holds key.
func (b *Backend) Path(key string) (string, error) {
	if key == "" || strings.Contains(key, "..") || strings.HasPrefix(key, "/") || strings.Contains(key, tempMark) {
		return "", fmt.Errorf("%s: bad key %q", b, key)
	}
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

func (b *Backend) Put(ctx context.Context, key string, body []byte, sum [sha256.Size]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := b.Path(key)
	if err != nil {
		return err
	}
	if sha256.Sum256(body) != sum {
		return blob.Errorf(blob.ErrBadDigest, "%s: put %s", b, key)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return b.ioError("put", key, err)
	}
	if err := datadir.WriteFile(path, body); err != nil {
		return b.ioError("put", key, err)
	}
	return nil
}

func (b *Backend) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := b.Path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, b.ioError("get", key, err)
	}
	defer f.Close()
	if n < 0 {
		st, err := f.Stat()
		if err != nil {
			return nil, b.ioError("get", key, err)
		}
		n = max(st.Size()-off, 0)
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, b.ioError("get", key, err)
	}
	return buf[:got], nil
}

func (b *Backend) Stat(ctx context.Context, key string) (blob.Info, error) {
	path, err := b.Path(key)
	if err != nil {
		return blob.Info{}, err
	}
	st, err := os.Lstat(path)
	if err != nil {
		return blob.Info{}, b.ioError("stat", key, err)
	}
	return blob.Info{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

func (b *Backend) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	// Walk the deepest folder the prefix names whole; filter the rest.
	start := b.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(b.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked, or never made
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || strings.Contains(d.Name(), tempMark) {
			return nil
		}
		rel, err := filepath.Rel(b.root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(blob.Info{Key: key, Size: st.Size(), ModTime: st.ModTime()})
	})
	if err != nil && ctx.Err() == nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return b.ioError("list", prefix, err)
		}
	}
	return err
}

func (b *Backend) Delete(ctx context.Context, key string) error {
	path, err := b.Path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.ioError("delete", key, err)
	}
	return nil
}

// ioError gives a file system error the kind callers test for.
func (b *Backend) ioError(op, key string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return blob.Errorf(blob.ErrNotFound, "%s: %s %s", b, op, key)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return blob.Errorf(blob.ErrFull, "%s: %s %s: %v", b, op, key, err)
	case errors.Is(err, fs.ErrPermission):
		return blob.Errorf(blob.ErrAccessDenied, "%s: %s %s: %v", b, op, key, err)
	}
	return blob.Errorf(blob.ErrUnreachable, "%s: %s %s: %v", b, op, key, err)
}
