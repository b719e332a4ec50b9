package inroot

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzResolve: for any symlink planted in the root and any path, with or
// without create, the kernel's resolution (openat2) and the walk agree on
// where the folder is; it is a clean path inside the root; and nothing is
// made outside the root.
func FuzzResolve(f *testing.F) {
	for _, s := range []struct {
		link, target, rel string
		create            bool
	}{
		{"l", "/usr/etc", "l", false},
		{"l", "../../../..", "l/usr", false},
		{"a/l", "../../x", "a/l/y", true},
		{"l", "/nowhere/deep", "l/er", true},
		{"l", "l", "l", false},
		{"a/b/l", "/a/b/l/../..", "a/b/l/etc", true},
		{"l", "a/../../../host", "l", true},
		{"etc", "/proc/self/root", "etc", false},
		{"x", "..", "x/x/x/../usr", false},
	} {
		f.Add(s.link, s.target, s.rel, s.create)
	}
	f.Fuzz(func(t *testing.T, link, target, rel string, create bool) {
		if len(link)+len(target)+len(rel) > 512 || target == "" {
			return
		}
		type result struct {
			rel string
			err error
		}
		run := func(kernel bool) result {
			saved := useOpenat2
			useOpenat2 = func() bool { return kernel && saved() }
			defer func() { useOpenat2 = saved }()
			outer := t.TempDir()
			root := filepath.Join(outer, "root")
			for _, d := range []string{"root/usr/etc", "root/a/b", "host"} {
				os.MkdirAll(filepath.Join(outer, d), 0o755)
			}
			r, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			// Plant the link with the package's own calls: its folder made
			// inside the root like any layer's.
			if dir, name := path.Split(strings.Trim(link, "/")); name != "" && name != "." && name != ".." {
				if d, err := r.Dir(dir, true); err == nil {
					d.Symlink(target, name)
					d.Close()
				}
			}
			d, err := r.Dir(rel, create)
			res := result{err: err}
			if err == nil {
				res.rel = d.Rel()
				d.Close()
				if path.Clean("/"+res.rel) != "/"+res.rel && res.rel != "" || res.rel == ".." || strings.HasPrefix(res.rel, "../") {
					t.Fatalf("Dir(%q) = %q: not a clean path inside the root", rel, res.rel)
				}
			}
			entries, _ := os.ReadDir(outer)
			host, _ := os.ReadDir(filepath.Join(outer, "host"))
			if len(entries) != 2 || len(host) != 0 {
				t.Fatalf("link %q -> %q, Dir(%q, %v) made something outside the root: %v %v", link, target, rel, create, entries, host)
			}
			return res
		}
		walk := run(false)
		if !useOpenat2() {
			return
		}
		kernel := run(true)
		lenient := func(err error) bool { return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENAMETOOLONG) }
		switch {
		case (walk.err == nil) != (kernel.err == nil):
			if !lenient(walk.err) && !lenient(kernel.err) {
				t.Fatalf("link %q -> %q, Dir(%q, %v): walk %q %v, openat2 %q %v", link, target, rel, create, walk.rel, walk.err, kernel.rel, kernel.err)
			}
		case walk.err == nil && walk.rel != kernel.rel:
			t.Fatalf("link %q -> %q, Dir(%q, %v): walk %q, openat2 %q", link, target, rel, create, walk.rel, kernel.rel)
		}
	})
}
