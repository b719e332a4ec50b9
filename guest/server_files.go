//go:build linux

package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
)

// fsErr gives a file system error its class and a message naming the path.
func fsErr(op, path string, err error) error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
	}
	var class *errdefs.Error
	switch {
	// Before ErrExist, which ENOTEMPTY also matches.
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EINVAL):
		class = errdefs.ErrInvalidArgument
	case errors.Is(err, fs.ErrNotExist):
		class, msg = errdefs.ErrFileNotFound, "no such file or directory"
	case errors.Is(err, fs.ErrExist):
		class, msg = errdefs.ErrFileExists, "file exists"
	default:
		class = errdefs.ErrInternal
	}
	return fmt.Errorf("%s %s: %s: %w", op, path, msg, class)
}

// cleanPath accepts absolute paths only: the agent has no notion of a
// caller's working directory.
func cleanPath(op, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s %q: path must be absolute: %w", op, p, errdefs.ErrInvalidArgument)
	}
	return filepath.Clean(p), nil
}

func toFileInfo(path string, fi fs.FileInfo) FileInfo {
	info := FileInfo{
		Name:    fi.Name(),
		Path:    path,
		Size:    fi.Size(),
		Mode:    fi.Mode().String(),
		Perm:    uint32(fi.Mode().Perm()),
		IsDir:   fi.IsDir(),
		ModTime: fi.ModTime().UTC(),
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		info.Symlink, _ = os.Readlink(path)
	}
	return info
}

// stat describes p (not following a final symlink); meta reads its
// metadata too.
func stat(p string, meta bool) (FileInfo, error) {
	p, err := cleanPath("stat", p)
	if err != nil {
		return FileInfo{}, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return FileInfo{}, fsErr("stat", p, err)
	}
	return describe(p, fi, &idNames{}, meta), nil
}

func list(p string, meta bool) ([]FileInfo, error) {
	p, err := cleanPath("list", p)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fsErr("list", p, err)
	}
	out := make([]FileInfo, 0, len(entries))
	names := &idNames{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		out = append(out, describe(filepath.Join(p, e.Name()), fi, names, meta))
	}
	return out, nil
}

func mkdir(p string, parents bool) (FileInfo, error) {
	p, err := cleanPath("mkdir", p)
	if err != nil {
		return FileInfo{}, err
	}
	if parents {
		err = os.MkdirAll(p, 0o755)
	} else {
		err = os.Mkdir(p, 0o755)
	}
	if err != nil {
		return FileInfo{}, fsErr("mkdir", p, err)
	}
	return stat(p, false)
}

func remove(p string, recursive bool) error {
	p, err := cleanPath("remove", p)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p); err != nil {
		return fsErr("remove", p, err)
	}
	if recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		return fsErr("remove", p, err)
	}
	return nil
}

// readFile sends FileInfo as the result, then the bytes as data chunks and
// an EOF chunk. A caller that stops reading closes its end; the watcher
// then closes ours so a write blocked on flow control returns.
func (s *Server) readFile(st *yamux.Stream, r *bufio.Reader, w *chunkWriter, path string) {
	p, err := cleanPath("read", path)
	if err != nil {
		w.fail(err)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		w.fail(fsErr("read", p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		w.fail(fsErr("read", p, err))
		return
	}
	if fi.IsDir() {
		w.fail(fmt.Errorf("read %s: is a directory: %w", p, errdefs.ErrInvalidArgument))
		return
	}
	go func() {
		io.Copy(io.Discard, r)
		st.Close()
	}()
	if err := w.json(chunkResult, toFileInfo(p, fi)); err != nil {
		return
	}
	buf := make([]byte, maxChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if werr := w.chunk(chunkData, buf[:n]); werr != nil {
				return
			}
		}
		if err == io.EOF {
			w.chunk(chunkEOF, nil)
			return
		}
		if err != nil {
			w.fail(fsErr("read", p, err))
			return
		}
	}
}

// writeFile receives data chunks into a temp file next to path and renames
// it into place on the EOF chunk; a stream that ends without one (caller
// cancelled, source failed, session lost) leaves nothing behind. The new
// file carries metadata md (and no other), and meta reads it back into the
// answer.
func (s *Server) writeFile(r *bufio.Reader, path string, perm uint32, user string, md map[string]string, meta bool) (FileInfo, error) {
	p, err := cleanPath("write", path)
	if err != nil {
		return FileInfo{}, err
	}
	if user == "" {
		s.mu.Lock()
		user = s.user
		s.mu.Unlock()
	}
	owner, err := lookupUser(user)
	if err != nil {
		return FileInfo{}, err
	}
	if perm == 0 {
		perm = 0o644
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return FileInfo{}, fsErr("write", p, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".zeish-*")
	if err != nil {
		return FileInfo{}, fsErr("write", p, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var buf []byte
	for done := false; !done; {
		kind, data, err := readChunk(r, buf)
		if err != nil {
			return FileInfo{}, fmt.Errorf("write %s: upload ended early: %v: %w", p, err, errdefs.ErrUnavailable)
		}
		buf = data
		switch kind {
		case chunkData:
			if _, err := tmp.Write(data); err != nil {
				return FileInfo{}, fsErr("write", p, err)
			}
		case chunkEOF:
			done = true
		default:
			return FileInfo{}, fmt.Errorf("write %s: unexpected chunk %q: %w", p, kind, errdefs.ErrInvalidArgument)
		}
	}
	if owner.uid != 0 || owner.gid != 0 {
		if err := tmp.Chown(int(owner.uid), int(owner.gid)); err != nil {
			return FileInfo{}, fsErr("write", p, err)
		}
	}
	if err := tmp.Chmod(os.FileMode(perm).Perm()); err != nil {
		return FileInfo{}, fsErr("write", p, err)
	}
	if len(md) > 0 {
		if err := setMetadata(tmp, p, md); err != nil {
			return FileInfo{}, err
		}
	}
	if err := tmp.Close(); err != nil {
		return FileInfo{}, fsErr("write", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return FileInfo{}, fsErr("write", p, err)
	}
	committed = true
	return stat(p, meta)
}
