package template

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/zeish/zeish/template/inroot"
	"github.com/zeish/zeish/template/ocisource"
	"golang.org/x/sys/unix"
)

// ErrBadImage says the image itself is unusable: not an image, a layer that
// escapes the root, more data than the disk holds. The message says which.
var ErrBadImage = ocisource.ErrBadImage

// OCI whiteout markers (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// unpacker applies layers to a root folder the way a container runtime's
// overlay would show them: later layers win, whiteouts delete, opaque
// markers hide everything lower in their folder.
//
// Every path is resolved inside root as the guest will see it (package
// inroot): an absolute symlink points into root, not at the host, and ".."
// stops at root, so nothing a layer holds can create, change or remove a
// file outside it. On top of that, a name or a relative symlink that climbs
// above root is refused rather than clamped, since no valid image needs one
// and a clamped write would land somewhere the author did not mean.
type unpacker struct {
	path  string
	root  *inroot.Root // opened by the first apply
	limit int64        // bytes the disk holds; exceeding it fails the build
	used  int64        // bytes of file data and inodes written so far
	owner bool         // chown entries (only root may)

	layer   map[string]bool // paths written by the layer being applied
	skipped int             // device nodes left out
	dirs    []dirTime       // folder mtimes, set after their contents
}

// dirTime is a folder's mtime to set once its contents are in: the folder
// by where it really is and by its inode, so a folder a later layer
// replaced (with a symlink, say) is skipped instead of followed.
type dirTime struct {
	rel      string
	dev, ino uint64
	t        time.Time
}

// inodeCost is what each entry is charged against the disk besides its data:
// an ext4 inode plus a share of a directory block.
const inodeCost = 512

func newUnpacker(root string, limit int64) *unpacker {
	return &unpacker{path: root, limit: limit, owner: os.Geteuid() == 0}
}

func (u *unpacker) open() error {
	if u.root != nil {
		return nil
	}
	r, err := inroot.Open(u.path)
	if err != nil {
		return err
	}
	u.root = r
	return nil
}

// close releases the root; finish calls it.
func (u *unpacker) close() {
	if u.root != nil {
		u.root.Close()
		u.root = nil
	}
}

// apply reads one uncompressed layer as a stream and applies it.
func (u *unpacker) apply(r io.Reader) error {
	if err := u.open(); err != nil {
		return err
	}
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

// finish sets folder mtimes, which writing their contents changed, and
// releases the root. A folder is found again inside the root, and skipped
// unless it is still the one made (a later layer may have put a symlink or
// another folder at its path).
func (u *unpacker) finish() {
	if u.open() != nil {
		return
	}
	defer u.close()
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		parentRel, name := path.Split(d.rel)
		parent, err := u.root.Dir(parentRel, false)
		if err != nil {
			continue
		}
		if st, err := parent.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev == d.dev && st.Ino == d.ino {
			parent.Utimes(name, d.t)
		}
		parent.Close()
	}
}

// cleanName turns a tar entry name into a slash path relative to root,
// refusing one that climbs above it.
func cleanName(name string) (string, error) {
	c := path.Clean(strings.TrimLeft(name, "/")) // "/etc" (or "//etc") in a layer is root's etc
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

// resolve opens folder rel inside the root (see inroot.Root.Dir); a path
// the image made impossible (a file where a folder must be, a symlink
// loop, a missing folder) is the image's fault.
func (u *unpacker) resolve(rel string, create bool) (*inroot.Dir, error) {
	d, err := u.root.Dir(rel, create)
	if err != nil {
		for _, e := range []error{unix.ENOTDIR, unix.ELOOP, unix.ENOENT, unix.ENAMETOOLONG} {
			if errors.Is(err, e) {
				return nil, fmt.Errorf("%v: %w", err, ErrBadImage)
			}
		}
		return nil, err
	}
	return d, nil
}

func (u *unpacker) entry(tr *tar.Reader, h *tar.Header) error {
	rel, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		if h.Typeflag != tar.TypeDir {
			return nil
		}
		top, err := u.resolve("", false)
		if err != nil {
			return err
		}
		defer top.Close()
		return u.meta(top, ".", h) // the root folder's own mode and owner
	}
	dirRel, base := path.Split(rel)
	dirRel = strings.TrimSuffix(dirRel, "/")
	dir, err := u.resolve(dirRel, true)
	if err != nil {
		return fmt.Errorf("layer entry %q: %w", h.Name, err)
	}
	defer dir.Close()
	if base == opaqueMarker {
		return u.opaque(dir, dirRel)
	}
	if victim, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		// ".wh.." and ".wh..." would name the folder itself or its parent.
		if victim == "" || victim == "." || victim == ".." {
			return fmt.Errorf("whiteout %q names no entry: %w", h.Name, ErrBadImage)
		}
		if err := dir.RemoveAll(victim); err != nil {
			return fmt.Errorf("whiteout %q: %w", h.Name, err)
		}
		return nil
	}
	if err := u.charge(h.Size); err != nil {
		return err
	}
	u.layer[rel] = true
	// An existing entry is replaced, except a folder by a folder (its
	// contents stay: layers merge).
	if st, err := dir.Lstat(base); err == nil && !(st.Mode&unix.S_IFMT == unix.S_IFDIR && h.Typeflag == tar.TypeDir) {
		if err := dir.RemoveAll(base); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := dir.Mkdir(base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		st, err := dir.Lstat(base)
		if err != nil {
			return err
		}
		u.dirs = append(u.dirs, dirTime{rel: path.Join(dir.Rel(), base), dev: st.Dev, ino: st.Ino, t: h.ModTime})
	case tar.TypeReg, tar.TypeRegA:
		f, err := dir.Create(base, 0o600)
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
		if err := checkSymlink(path.Join(dir.Rel(), base), h.Linkname); err != nil {
			return err
		}
		if err := dir.Symlink(h.Linkname, base); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := cleanName(h.Linkname)
		if err != nil {
			return err
		}
		tdirRel, tbase := path.Split(target)
		if tbase == "" {
			return fmt.Errorf("hard link %q: target %q is the root: %w", h.Name, h.Linkname, ErrBadImage)
		}
		tdir, err := u.resolve(strings.TrimSuffix(tdirRel, "/"), false)
		if err != nil {
			return fmt.Errorf("hard link %q to %q: %w", h.Name, h.Linkname, err)
		}
		defer tdir.Close()
		if st, err := tdir.Lstat(tbase); err != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return fmt.Errorf("hard link %q: target %q is missing or a folder: %w", h.Name, h.Linkname, ErrBadImage)
		}
		// link(2) does not follow a symlink target: the link is to the
		// entry itself, as tar means.
		return dir.Link(tdir, tbase, base)
	case tar.TypeFifo:
		if err := dir.Mkfifo(base, uint32(h.Mode&0o7777)); err != nil {
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
	return u.meta(dir, base, h)
}

// meta sets owner, mode, extended attributes and times of the entry name
// in dir ("." for dir itself). chown comes first: it clears setuid and
// setgid bits.
func (u *unpacker) meta(dir *inroot.Dir, name string, h *tar.Header) error {
	if u.owner {
		if err := dir.Lchown(name, h.Uid, h.Gid); err != nil {
			return err
		}
	}
	for k, v := range h.PAXRecords {
		attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		// ext4 keeps user., trusted. and security. attributes; others
		// (and ones the staging folder cannot take) are dropped.
		if err := dir.Setxattr(name, attr, []byte(v)); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("set xattr %s on %s: %w", attr, h.Name, err)
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		return dir.Utimes(name, h.ModTime)
	}
	if err := dir.Chmod(name, uint32(h.Mode&0o7777)); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir {
		return dir.Utimes(name, h.ModTime)
	}
	return nil
}

// opaque removes what lower layers put into dir (at lexical path rel, as
// this layer's entries name it), keeping this layer's.
func (u *unpacker) opaque(dir *inroot.Dir, rel string) error {
	names, err := dir.Names()
	if err != nil {
		return err
	}
	for _, name := range names {
		childRel := path.Join(rel, name)
		if !u.layer[childRel] {
			if err := dir.RemoveAll(name); err != nil {
				return err
			}
			continue
		}
		if st, err := dir.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := dir.Sub(name)
			if err != nil {
				return err
			}
			err = u.opaque(sub, childRel)
			sub.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSymlink refuses a relative symlink at rel, where it really is
// (its folder's symlinks resolved), whose target climbs above the root.
// Absolute targets are fine: the guest resolves them in its root, and so
// does every write here. The refusal is a verdict on the image, not the
// containment: a link that slipped through would still resolve inside.
func checkSymlink(rel, target string) error {
	if target == "" {
		return fmt.Errorf("symlink %q has an empty target: %w", rel, ErrBadImage)
	}
	if path.IsAbs(target) {
		return nil
	}
	depth := strings.Count(rel, "/") // folders above the link
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
