package inroot

import (
	"errors"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// walk resolves folder rel without openat2: one component at a time, each
// opened with O_NOFOLLOW under the folder before it, each symlink read and
// its target walked in its place (an absolute one from the root). ".." pops
// back to the folder opened before, never above the root: the path is never
// handed to the kernel whole, so no link can take it outside.
func (r *Root) walk(rel string, create bool) (*Dir, error) {
	type frame struct {
		fd   int
		name string
	}
	rootFD, err := unix.Dup(r.fd)
	if err != nil {
		return nil, err
	}
	stack := []frame{{fd: rootFD}}
	defer func() {
		for _, f := range stack {
			unix.Close(f.fd)
		}
	}()
	fail := func(err error) (*Dir, error) { return nil, &fs.PathError{Op: "resolve", Path: rel, Err: err} }
	todo := strings.Split(rel, "/")
	hops := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				unix.Close(stack[len(stack)-1].fd)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		cur := stack[len(stack)-1].fd
		var st unix.Stat_t
		err := unix.Fstatat(cur, part, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(cur, part, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				err = unix.Fstatat(cur, part, &st, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
		if err != nil {
			return fail(err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fd, err := unix.Openat(cur, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(err)
			}
			stack = append(stack, frame{fd: fd, name: part})
		case unix.S_IFLNK:
			if hops++; hops > maxHops {
				return fail(unix.ELOOP)
			}
			d := &Dir{fd: cur}
			target, err := d.Readlink(part)
			if err != nil {
				return fail(err)
			}
			if strings.HasPrefix(target, "/") {
				for _, f := range stack[1:] {
					unix.Close(f.fd)
				}
				stack = stack[:1]
			}
			todo = append(strings.Split(target, "/"), todo...)
		default:
			return fail(unix.ENOTDIR)
		}
	}
	names := make([]string, 0, len(stack)-1)
	for _, f := range stack[1:] {
		names = append(names, f.name)
	}
	top := stack[len(stack)-1]
	stack = stack[:len(stack)-1] // the deferred close spares the one returned
	return &Dir{fd: top.fd, rel: strings.Join(names, "/")}, nil
}
