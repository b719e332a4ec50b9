// Package inroot writes into a folder that holds an untrusted tree (an
// image's root filesystem being unpacked) as if that folder were the
// tree's "/": every path is resolved inside it, the way the guest's kernel
// resolves it in its own root. An absolute symlink starts again at the
// folder, ".." stops there, and nothing outside it is ever created,
// changed or removed, whatever links the tree holds.
//
// Folders are resolved by the kernel with openat2(RESOLVE_IN_ROOT); on a
// kernel without openat2 (before Linux 5.6) by a walk of our own that
// follows each symlink component by component through file descriptors
// (walk.go). Either way a caller gets a Dir, an open folder, and names one
// entry in it at a time: the last component of a path is never followed,
// and a folder once opened is never looked up again through its parents.
//
// The tree's only writer is the caller (a build's private staging folder):
// no other process swaps entries between a stat and the call after it.
package inroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxHops bounds the symlinks one resolution follows, as the kernel's
// MAXSYMLINKS does.
const maxHops = 40

// Root is an open folder that paths are resolved in.
type Root struct {
	fd   int
	path string // its real path: the prefix /proc/self/fd links carry
}

// Open opens the folder at path as a root. The folder itself is the
// caller's (its own path is trusted, symlinks in it followed).
func Open(path string) (*Root, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: real, Err: err}
	}
	return &Root{fd: fd, path: real}, nil
}

// Close releases the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the root's real path on the host, for messages.
func (r *Root) Path() string { return r.path }

var (
	openat2Once sync.Once
	openat2OK   bool
)

// useOpenat2 reports whether this kernel has openat2 with RESOLVE_IN_ROOT;
// tests turn it off to run the walk.
var useOpenat2 = func() bool {
	openat2Once.Do(func() {
		fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err == nil {
			unix.Close(fd)
		}
		openat2OK = err == nil
	})
	return openat2OK
}

// Dir opens folder rel ("" or "." is the root itself) as the tree's own
// kernel would find it with the root as "/". With create, folders missing
// on the way are made (mode 0755, as tar does), a dangling symlink's at its
// target inside the root. A component that is not a folder fails with
// ENOTDIR, too many symlinks with ELOOP, a missing folder without create
// with ENOENT (all wrapped in *fs.PathError).
func (r *Root) Dir(rel string, create bool) (*Dir, error) {
	if !useOpenat2() {
		return r.walk(rel, create)
	}
	hops := 0
	return r.dir(rel, create, &hops)
}

func (r *Root) dir(rel string, create bool, hops *int) (*Dir, error) {
	fd, err := openInRoot(r.fd, rel)
	if err == nil {
		return r.fromFD(fd)
	}
	if !errors.Is(err, unix.ENOENT) || !create {
		return nil, &fs.PathError{Op: "resolve", Path: rel, Err: err}
	}
	// A folder on the way is missing: make the parent, then this one.
	parentRel, name := splitLast(rel)
	if name == "" || name == "." || name == ".." {
		// Nothing to make here: what is missing is in the parent.
		p, err := r.dir(parentRel, true, hops)
		if err != nil {
			return nil, err
		}
		p.Close()
		fd, err := openInRoot(r.fd, rel)
		if err != nil {
			return nil, &fs.PathError{Op: "resolve", Path: rel, Err: err}
		}
		return r.fromFD(fd)
	}
	p, err := r.dir(parentRel, true, hops)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := unix.Mkdirat(p.fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(p.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "resolve", Path: rel, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return p.Sub(name)
	case unix.S_IFLNK:
		// A dangling symlink: make its target, inside the root.
		if *hops++; *hops > maxHops {
			return nil, &fs.PathError{Op: "resolve", Path: rel, Err: unix.ELOOP}
		}
		target, err := p.Readlink(name)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(target, "/") {
			target = p.rel + "/" + target
		}
		return r.dir(target, true, hops)
	}
	return nil, &fs.PathError{Op: "resolve", Path: rel, Err: unix.ENOTDIR}
}

// openInRoot opens folder rel under dirfd with dirfd as the root.
func openInRoot(dirfd int, rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // RESOLVE_IN_ROOT retries a lookup that raced a rename
		}
		return fd, err
	}
}

// fromFD wraps a folder fd that openat2 resolved, naming it by the path
// the kernel reports for it.
func (r *Root) fromFD(fd int) (*Dir, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	rel, ok := strings.CutPrefix(p, r.path)
	if !ok || rel != "" && rel[0] != '/' {
		unix.Close(fd)
		return nil, fmt.Errorf("inroot: %s resolved to %s, outside the root", r.path, p)
	}
	return &Dir{fd: fd, rel: strings.TrimPrefix(rel, "/")}, nil
}

// splitLast splits a path at its last slash (no cleaning: "a/.." keeps
// its "..", which only the kernel may resolve).
func splitLast(p string) (parent, name string) {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// Dir is an open folder inside a root. Its methods take one entry's name
// (never a path, never "..") and never follow it if it is a symlink.
type Dir struct {
	fd  int
	rel string // where it is: a clean path from the root, "" for the root
}

// Rel is the folder's path from the root, symlinks resolved ("" for the root).
func (d *Dir) Rel() string { return d.rel }

// Close releases the folder.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// checkName refuses anything but one entry's name; self allows "." (the
// folder itself) for calls that change metadata.
func checkName(name string, self bool) error {
	if name == "" || name == ".." || strings.ContainsRune(name, '/') || name == "." && !self {
		return &fs.PathError{Op: "name", Path: name, Err: unix.EINVAL}
	}
	return nil
}

func (d *Dir) err(op, name string, err error) error {
	if err == nil {
		return nil
	}
	p := name
	if d.rel != "" {
		p = d.rel + "/" + name
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// Lstat describes the entry name without following it.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkName(name, true); err != nil {
		return st, err
	}
	return st, d.err("lstat", name, unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW))
}

// Exists reports whether an entry called name is there (of any type).
func (d *Dir) Exists(name string) bool {
	_, err := d.Lstat(name)
	return err == nil
}

// Sub opens the folder name (a symlink there is refused, not followed).
func (d *Dir) Sub(name string) (*Dir, error) {
	if err := checkName(name, false); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.err("open", name, err)
	}
	rel := name
	if d.rel != "" {
		rel = d.rel + "/" + name
	}
	return &Dir{fd: fd, rel: rel}, nil
}

// Mkdir makes the folder name with perm (the umask applies).
func (d *Dir) Mkdir(name string, perm uint32) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	return d.err("mkdir", name, unix.Mkdirat(d.fd, name, perm))
}

// Create makes the new file name (refusing one that exists, a symlink
// included) and opens it for writing.
func (d *Dir) Create(name string, perm uint32) (*os.File, error) {
	if err := checkName(name, false); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, d.err("create", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// WriteFile replaces the entry name (a file or symlink; a folder is
// refused) with a new file holding data, mode perm exactly.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode) error {
	if err := d.Remove(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	f, err := d.Create(name, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Symlink makes name a symlink to target (stored as given: it is the
// tree's to resolve, in its root).
func (d *Dir) Symlink(target, name string) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	return d.err("symlink", name, unix.Symlinkat(target, d.fd, name))
}

// Readlink returns the target of the symlink name.
func (d *Dir) Readlink(name string) (string, error) {
	if err := checkName(name, false); err != nil {
		return "", err
	}
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", d.err("readlink", name, err)
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// Link makes name a hard link to the entry srcName of src (a symlink is
// linked itself, not followed, as tar means).
func (d *Dir) Link(src *Dir, srcName, name string) error {
	if err := checkName(srcName, false); err != nil {
		return err
	}
	if err := checkName(name, false); err != nil {
		return err
	}
	return d.err("link", name, unix.Linkat(src.fd, srcName, d.fd, name, 0))
}

// Mkfifo makes the named pipe name.
func (d *Dir) Mkfifo(name string, perm uint32) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	return d.err("mkfifo", name, unix.Mknodat(d.fd, name, unix.S_IFIFO|perm&0o7777, 0))
}

// Lchown sets the owner of name ("." the folder itself), not following it.
func (d *Dir) Lchown(name string, uid, gid int) error {
	if err := checkName(name, true); err != nil {
		return err
	}
	return d.err("lchown", name, unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
}

// Chmod sets the mode bits (permissions, setuid, setgid, sticky) of name
// ("." the folder itself). A symlink has no mode of its own: left alone.
func (d *Dir) Chmod(name string, mode uint32) error {
	if err := checkName(name, true); err != nil {
		return err
	}
	mode &= 0o7777
	err := unix.Fchmodat(d.fd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// fchmodat2 is missing (before Linux 6.6), or name is a symlink.
		st, lerr := d.Lstat(name)
		if lerr != nil {
			return lerr
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil
		}
		err = unix.Fchmodat(d.fd, name, mode, 0) // not a symlink: nothing to follow
	}
	return d.err("chmod", name, err)
}

// Utimes sets the access and modification times of name ("." the folder
// itself), not following it.
func (d *Dir) Utimes(name string, t time.Time) error {
	if err := checkName(name, true); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(t.UnixNano())
	return d.err("utimes", name, unix.UtimesNanoAt(d.fd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
}

// Setxattr sets an extended attribute of name ("." the folder itself), not
// following it. The path goes through /proc/self/fd: the folder is the one
// this Dir holds, whatever its parents became.
func (d *Dir) Setxattr(name, attr string, value []byte) error {
	if err := checkName(name, true); err != nil {
		return err
	}
	p := "/proc/self/fd/" + strconv.Itoa(d.fd) + "/" + name
	return d.err("setxattr", name, unix.Lsetxattr(p, attr, value, 0))
}

// Names lists the folder's entries.
func (d *Dir) Names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, d.err("open", ".", err)
	}
	f := os.NewFile(uintptr(fd), d.rel)
	defer f.Close()
	return f.Readdirnames(-1)
}

// Remove deletes the entry name: a file, symlink or empty folder.
func (d *Dir) Remove(name string) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	return d.err("remove", name, err)
}

// RemoveAll deletes the entry name and, for a folder, everything in it
// (symlinks inside are removed, never followed). A missing entry is no error.
func (d *Dir) RemoveAll(name string) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	return d.err("remove", name, removeAllAt(d.fd, name, 0))
}

// maxDepth bounds RemoveAll's recursion: a tar path is at most a few
// thousand bytes, so no layer makes a deeper tree.
const maxDepth = 4096

func removeAllAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	if depth > maxDepth {
		return unix.ELOOP
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	names, err := f.Readdirnames(-1) // all first: deleting while listing skips entries
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAllAt(fd, n, depth+1); err != nil {
			return err
		}
	}
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
