//go:build linux

package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/errdefs"
)

// What a file entry says beyond os.Lstat: who owns it by name, where a
// symbolic link leads, and the file's user metadata.

// idNames names uids and gids from the guest's /etc/passwd and /etc/group,
// read once per call that needs them (a listing reads them once for all its
// entries).
type idNames struct {
	users, groups map[uint32]string
	loaded        bool
}

func (n *idNames) load() {
	if n.loaded {
		return
	}
	n.loaded = true
	n.users, n.groups = map[uint32]string{}, map[uint32]string{}
	for file, m := range map[string]map[uint32]string{passwdFile: n.users, groupFile: n.groups} {
		forEachLine(file, func(f []string) bool {
			if len(f) >= 3 {
				if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					if _, dup := m[uint32(id)]; !dup {
						m[uint32(id)] = f[0] // the first entry of an id names it, as getpwuid does
					}
				}
			}
			return true
		})
	}
}

// owner is the names of uid and gid, or their numbers when they have none.
func (n *idNames) owner(uid, gid uint32) (string, string) {
	n.load()
	user, ok := n.users[uid]
	if !ok {
		user = strconv.FormatUint(uint64(uid), 10)
	}
	group, ok := n.groups[gid]
	if !ok {
		group = strconv.FormatUint(uint64(gid), 10)
	}
	return user, group
}

// describe is the entry at path, whose Lstat is fi.
func describe(path string, fi fs.FileInfo, names *idNames, meta bool) FileInfo {
	info := toFileInfo(path, fi)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Owner, info.Group = names.owner(st.Uid, st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		info.Target = linkTarget(path)
	}
	if meta {
		info.Metadata = readMetadata(path)
	}
	return info
}

// linkTarget follows every link from path to what finally stands there.
func linkTarget(path string) *LinkTarget {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return &LinkTarget{}
	}
	if !filepath.IsAbs(resolved) {
		// EvalSymlinks keeps a relative start relative; paths here are
		// absolute, but never hand out a relative target.
		if resolved, err = filepath.Abs(resolved); err != nil {
			return &LinkTarget{}
		}
	}
	t := &LinkTarget{Path: resolved}
	if fi, err := os.Stat(resolved); err == nil {
		t.Mode, t.Perm = fi.Mode().String(), uint32(fi.Mode().Perm())
	}
	return t
}

// readMetadata is the user metadata of the file at path (following a final
// symlink, as the kernel's xattr calls do). It is best effort: a file system
// without xattrs (/proc) or a value that is not UTF-8 (set inside the guest
// with setfattr) has none, and an error reading them leaves them out.
func readMetadata(path string) map[string]string {
	names, err := listXattrs(path)
	if err != nil {
		return nil
	}
	var md map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataXattrPrefix)
		if !ok {
			continue
		}
		value, err := getXattr(path, name)
		if err != nil || !utf8.ValidString(key) || !utf8.Valid(value) {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(value)
	}
	return md
}

// listXattrs lists the extended attributes' names of path.
func listXattrs(path string) ([]string, error) {
	for size := 1024; size <= 1<<20; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Listxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				out = append(out, name)
			}
		}
		return out, nil
	}
	return nil, unix.E2BIG
}

func getXattr(path, name string) ([]byte, error) {
	for size := 256; size <= 64<<10; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.E2BIG
}

// setMetadata gives the open file f (a write's new temp file, so it has none
// yet) the metadata md. A file system without user xattrs keeps none: the
// write's answer reads them back, so it never claims what was not kept.
func setMetadata(f *os.File, path string, md map[string]string) error {
	if err := CheckMetadata(md); err != nil {
		return err
	}
	for k, v := range md {
		err := unix.Fsetxattr(int(f.Fd()), MetadataXattrPrefix+k, []byte(v), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP):
			return nil
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.E2BIG):
			return fmt.Errorf("write %s: no room for its metadata: %v: %w", path, err, errdefs.ErrStorageFull)
		default:
			return fsErr("write", path, err)
		}
	}
	return nil
}
