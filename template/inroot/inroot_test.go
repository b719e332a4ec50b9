package inroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/testskip"
	"golang.org/x/sys/unix"
)

// modes runs f with the kernel's resolution and with the walk.
func modes(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", func(t *testing.T) {
		if !useOpenat2() {
			testskip.Skip(t, "this kernel has no openat2 (Linux < 5.6)")
		}
		f(t)
	})
	t.Run("walk", func(t *testing.T) {
		saved := useOpenat2
		useOpenat2 = func() bool { return false }
		defer func() { useOpenat2 = saved }()
		f(t)
	})
}

// tree makes outer/root with links inside root pointing every which way.
func tree(t *testing.T) (outer, root string) {
	outer = t.TempDir()
	root = filepath.Join(outer, "root")
	for _, d := range []string{"root/usr/etc", "root/a/b", "host/x"} {
		if err := os.MkdirAll(filepath.Join(outer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"root/etc":       "/usr/etc",
		"root/hostabs":   filepath.Join(outer, "host"),
		"root/up":        "../../../..",
		"root/a/b/up":    "../../..",
		"root/a/b/c":     "/a",
		"root/loop":      "loop",
		"root/dangling":  "/made/by/create",
		"root/danglrel":  "../rel/made",
		"root/file.lnk":  "/usr/etc/file",
		"root/magic":     "/proc/self/root",
		"root/a/b/abs":   "/",
		"root/dotdotabs": "/../../..",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(outer, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "usr/etc/file"), []byte("f"), 0o644)
	return outer, root
}

func TestDirResolvesInsideTheRoot(t *testing.T) {
	modes(t, func(t *testing.T) {
		outer, root := tree(t)
		r, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		cases := []struct {
			rel    string
			create bool
			want   string // the folder's Rel, or an errno's text
		}{
			{"", false, ""},
			{".", false, ""},
			{"etc", false, "usr/etc"},
			{"/etc/../etc", false, "usr/etc"}, // ".." after a link is the target's parent
			{"hostabs/x", true, filepath.Join(outer, "host/x")[1:]},
			{"up", false, ""},
			{"up/etc", false, "usr/etc"},
			{"a/b/up/usr", false, "usr"},
			{"a/b/c/b/c/b", false, "a/b"},
			{"a/b/abs/a/b/abs", false, ""},
			{"dotdotabs/a", false, "a"},
			{"loop", false, "too many levels of symbolic links"},
			{"file.lnk", false, "not a directory"},
			{"usr/etc/file/x", true, "not a directory"},
			{"missing", false, "no such file or directory"},
			{"dangling", false, "no such file or directory"},
			{"dangling/deeper", true, "made/by/create/deeper"},
			{"danglrel", true, "rel/made"},
			{"new/a/../b", true, "new/b"},
			{"magic", false, ""}, // /proc/self/root in the root: a missing /proc, not the host's
		}
		for _, c := range cases {
			d, err := r.Dir(c.rel, c.create)
			got := ""
			if err != nil {
				var errno unix.Errno
				if !errors.As(err, &errno) {
					t.Errorf("%q: %v is no errno", c.rel, err)
				}
				got = errno.Error()
			} else {
				got = d.Rel()
				d.Close()
			}
			if c.rel == "magic" {
				if err == nil || !strings.Contains(got, "no such file") {
					t.Errorf("%q: %q, %v: want a missing folder", c.rel, got, err)
				}
				continue
			}
			if got != c.want {
				t.Errorf("Dir(%q, %v) = %q, want %q", c.rel, c.create, got, c.want)
			}
		}
		// Nothing was made outside.
		if _, err := os.Lstat(filepath.Join(outer, "rel")); err == nil {
			t.Error("a relative dangling link made a folder outside the root")
		}
		if _, err := os.Lstat(filepath.Join(outer, "host/x")); err != nil {
			t.Error(err)
		}
		entries, _ := os.ReadDir(outer)
		if len(entries) != 2 {
			t.Errorf("outer holds %v", entries)
		}
	})
}

func TestEntriesAreNeverFollowed(t *testing.T) {
	modes(t, func(t *testing.T) {
		outer, root := tree(t)
		hostFile := filepath.Join(outer, "host", "x", "keep")
		os.WriteFile(hostFile, []byte("keep"), 0o644)
		os.Symlink(filepath.Join(outer, "host"), filepath.Join(root, "a", "b", "hostlink"))
		r, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		top, err := r.Dir("", false)
		if err != nil {
			t.Fatal(err)
		}
		defer top.Close()
		if _, err := top.Create("hostabs", 0o644); !errors.Is(err, unix.EEXIST) {
			t.Errorf("create over a symlink: %v", err)
		}
		if err := top.Chmod("hostabs", 0o700); err != nil {
			t.Errorf("chmod of a symlink: %v", err)
		}
		if err := top.Lchown("hostabs", 1, 1); err != nil && !errors.Is(err, unix.EPERM) {
			t.Errorf("lchown: %v", err)
		}
		for _, bad := range []string{"", ".", "..", "a/b", "/x"} {
			if err := top.Mkdir(bad, 0o755); !errors.Is(err, unix.EINVAL) {
				t.Errorf("Mkdir(%q): %v", bad, err)
			}
		}
		// RemoveAll removes the link inside a folder, not what it points to.
		if err := top.RemoveAll("a"); err != nil {
			t.Fatal(err)
		}
		if err := top.RemoveAll("hostabs"); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(hostFile); err != nil || string(b) != "keep" {
			t.Errorf("host file after RemoveAll: %q %v", b, err)
		}
		if fi, err := os.Stat(filepath.Join(outer, "host")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("host folder: %v %v", fi, err)
		}
		if _, err := os.Lstat(filepath.Join(root, "a")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a still there: %v", err)
		}
	})
}
