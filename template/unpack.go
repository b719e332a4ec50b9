package template

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBadImage says the image itself is unusable: not an image, a layer that
// escapes the root, more data than the disk holds. The message says which.
var ErrBadImage = errors.New("bad image")

// OCI whiteout markers (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// unpacker applies layers to a root folder the way a container runtime's
// overlay would show them: later layers win, whiteouts delete, opaque
// markers hide everything lower in their folder.
//
// Paths are resolved inside root as the guest will see them: an absolute
// symlink points into root, not at the host. A name or a relative symlink
// that climbs above root is refused rather than clamped, since no valid
// image needs one and a clamped write would land somewhere the author did not
// mean.
type unpacker struct {
	root  string
	limit int64 // bytes the disk holds; exceeding it fails the build
	used  int64 // bytes of file data and inodes written so far
	owner bool  // chown entries (only root may)

	layer   map[string]bool // paths written by the layer being applied
	skipped int             // device nodes left out
	dirs    []dirTime       // folder mtimes, set after their contents
}

type dirTime struct {
	path string
	t    time.Time
}

// inodeCost is what each entry is charged against the disk besides its data:
// an ext4 inode plus a share of a directory block.
const inodeCost = 512

func newUnpacker(root string, limit int64) *unpacker {
	return &unpacker{root: root, limit: limit, owner: os.Geteuid() == 0}
}

// apply reads one uncompressed layer as a stream and applies it.
func (u *unpacker) apply(r io.Reader) error {
	u.layer = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %v: %w", err, ErrBadImage)
		}
		if err := u.entry(tr, h); err != nil {
			return err
		}
	}
}

// finish sets folder mtimes, which writing their contents changed.
func (u *unpacker) finish() {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		unix.Lutimes(d.path, []unix.Timeval{unix.NsecToTimeval(d.t.UnixNano()), unix.NsecToTimeval(d.t.UnixNano())})
	}
}

// cleanName turns a tar entry name into a slash path relative to root,
// refusing one that climbs above it.
func cleanName(name string) (string, error) {
	c := path.Clean(strings.TrimPrefix(name, "/")) // "/etc" in a layer is root's etc
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("layer entry %q climbs above the root: %w", name, ErrBadImage)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

func (u *unpacker) charge(n int64) error {
	u.used += n + inodeCost
	if u.limit > 0 && u.used > u.limit {
		return fmt.Errorf("the image holds more than the disk's %d MiB (raise disk_mib): %w", u.limit>>20, ErrBadImage)
	}
	return nil
}

func (u *unpacker) entry(tr *tar.Reader, h *tar.Header) error {
	rel, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	if rel == "" || rel == "." {
		if h.Typeflag == tar.TypeDir {
			return u.meta(u.root, h) // the root folder's own mode and owner
		}
		return nil
	}
	dirRel, base := path.Split(rel)
	dir, err := u.resolve(strings.TrimSuffix(dirRel, "/"), true)
	if err != nil {
		return fmt.Errorf("layer entry %q: %w", h.Name, err)
	}
	if base == opaqueMarker {
		return u.opaque(dir, strings.TrimSuffix(dirRel, "/"))
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		victim := filepath.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		if err := os.RemoveAll(victim); err != nil {
			return fmt.Errorf("whiteout %q: %w", h.Name, err)
		}
		return nil
	}
	if err := u.charge(h.Size); err != nil {
		return err
	}
	dst := filepath.Join(dir, base)
	u.layer[rel] = true
	// An existing entry is replaced, except a folder by a folder (its
	// contents stay: layers merge).
	if fi, err := os.Lstat(dst); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		u.dirs = append(u.dirs, dirTime{dst, h.ModTime})
	case tar.TypeReg, tar.TypeRegA:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
	case tar.TypeSymlink:
		if err := u.checkSymlink(rel, h.Linkname); err != nil {
			return err
		}
		if err := os.Symlink(h.Linkname, dst); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := cleanName(h.Linkname)
		if err != nil {
			return err
		}
		tdirRel, tbase := path.Split(target)
		tdir, err := u.resolve(strings.TrimSuffix(tdirRel, "/"), false)
		if err != nil {
			return fmt.Errorf("hard link %q to %q: %w", h.Name, h.Linkname, err)
		}
		src := filepath.Join(tdir, tbase)
		if fi, err := os.Lstat(src); err != nil || fi.IsDir() {
			return fmt.Errorf("hard link %q: target %q is missing or a folder: %w", h.Name, h.Linkname, ErrBadImage)
		}
		// link(2) does not follow a symlink target: the link is to the
		// entry itself, as tar means.
		return os.Link(src, dst)
	case tar.TypeFifo:
		if err := unix.Mkfifo(dst, uint32(h.Mode&0o7777)); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		u.skipped++ // devtmpfs provides the guest's devices
		delete(u.layer, rel)
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("layer entry %q has unsupported type %q: %w", h.Name, h.Typeflag, ErrBadImage)
	}
	return u.meta(dst, h)
}

// meta sets owner, mode, extended attributes and times. chown comes first:
// it clears setuid and setgid bits.
func (u *unpacker) meta(p string, h *tar.Header) error {
	if u.owner {
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
	}
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		// ext4 keeps user., trusted. and security. attributes; others
		// (and ones the staging folder cannot take) are dropped.
		if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("set xattr %s on %s: %w", name, h.Name, err)
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		t := unix.NsecToTimeval(h.ModTime.UnixNano())
		return unix.Lutimes(p, []unix.Timeval{t, t})
	}
	if err := os.Chmod(p, fileMode(h.Mode)); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir {
		return os.Chtimes(p, h.ModTime, h.ModTime)
	}
	return nil
}

// fileMode converts tar's Unix mode bits to Go's.
func fileMode(m int64) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// opaque removes what lower layers put into dir, keeping this layer's.
func (u *unpacker) opaque(dir, rel string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		childRel := path.Join(rel, e.Name())
		child := filepath.Join(dir, e.Name())
		if !u.layer[childRel] {
			if err := os.RemoveAll(child); err != nil {
				return err
			}
			continue
		}
		if e.IsDir() {
			if err := u.opaque(child, childRel); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSymlink refuses a relative symlink at rel whose target climbs above
// the root. Absolute targets are fine: the guest resolves them in its root,
// and so does resolve.
func (u *unpacker) checkSymlink(rel, target string) error {
	if target == "" {
		return fmt.Errorf("symlink %q has an empty target: %w", rel, ErrBadImage)
	}
	if path.IsAbs(target) {
		return nil
	}
	depth := strings.Count(path.Dir("/"+rel), "/")
	if path.Dir("/"+rel) == "/" {
		depth = 0
	}
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("symlink %q -> %q escapes the root: %w", rel, target, ErrBadImage)
			}
		case ".", "":
		default:
			depth++
		}
	}
	return nil
}

// resolve returns the host path of folder rel inside root, following
// symlinks as the guest would (absolute ones from root, ".." stopping at
// root). With create, missing folders are made (mode 0755, like tar).
func (u *unpacker) resolve(rel string, create bool) (string, error) {
	cur := ""             // resolved, relative to root
	todo := splitRel(rel) // components still to walk
	hops := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case ".", "":
			continue
		case "..":
			// Names and relative symlinks that climb were refused on the
			// way in; what is left is an absolute target's "..", which
			// the guest's kernel stops at its root, and so does this.
			cur = path.Dir(cur)
			if cur == "." {
				cur = ""
			}
			continue
		}
		next := path.Join(cur, part)
		host := filepath.Join(u.root, next)
		fi, err := os.Lstat(host)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if !create {
				return "", fmt.Errorf("%q does not exist: %w", next, ErrBadImage)
			}
			if err := os.Mkdir(host, 0o755); err != nil {
				return "", err
			}
			cur = next
		case err != nil:
			return "", err
		case fi.Mode()&os.ModeSymlink != 0:
			if hops++; hops > 40 {
				return "", fmt.Errorf("too many symlinks resolving %q: %w", rel, ErrBadImage)
			}
			target, err := os.Readlink(host)
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				cur = ""
			}
			todo = append(splitRel(target), todo...)
		case fi.IsDir():
			cur = next
		default:
			return "", fmt.Errorf("%q is not a folder: %w", next, ErrBadImage)
		}
	}
	return filepath.Join(u.root, cur), nil
}

func splitRel(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
