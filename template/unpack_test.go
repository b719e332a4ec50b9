package template

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"golang.org/x/sys/unix"
)

func unpackImage(t *testing.T, img v1.Image, root string, limit int64) error {
	t.Helper()
	u := newUnpacker(root, limit)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		err = u.apply(rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	u.finish()
	return nil
}

func TestUnpackStandardImage(t *testing.T) {
	root := t.TempDir()
	if err := unpackImage(t, ociimg.Standard(t), root, 0); err != nil {
		t.Fatal(err)
	}
	at := func(p string) string { return filepath.Join(root, p) }
	exists := []string{"bin/busybox", "data/old/keep.txt", "opq/upper.txt", "data/hard", "usr/local/bin/suid", "home/app/owned.txt"}
	for _, p := range exists {
		if _, err := os.Lstat(at(p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	gone := []string{"data/old/gone.txt", "opq/lower.txt", "opq/sub", "dev/evil"}
	for _, p := range gone {
		if _, err := os.Lstat(at(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s should be gone (whiteout, opaque dir or device node), got %v", p, err)
		}
	}
	keep, _ := os.Stat(at("data/old/keep.txt"))
	hard, _ := os.Stat(at("data/hard"))
	if keep == nil || hard == nil || !os.SameFile(keep, hard) {
		t.Errorf("data/hard is not a hard link of data/old/keep.txt")
	}
	if l, err := os.Readlink(at("data/link")); err != nil || l != "/data/old/keep.txt" {
		t.Errorf("data/link -> %q, %v", l, err)
	}
	if l, _ := os.Readlink(at("bin/sh")); l != "busybox" {
		t.Errorf("bin/sh -> %q", l)
	}
	if fi, err := os.Stat(at("usr/local/bin/suid")); err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("suid mode = %v, %v", fi.Mode(), err)
	}
	fi, err := os.Stat(at("home/app/owned.txt"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("owned.txt: %v %v", fi, err)
	}
	if os.Geteuid() == 0 {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("owned.txt owner %d:%d, want 1000:1000", st.Uid, st.Gid)
		}
		if d, _ := os.Stat(at("home/app")); d.Mode().Perm() != 0o750 || d.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("home/app: %v", d.Mode())
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(at("data/xattr.txt"), "user.zeish", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("xattr user.zeish = %q, %v", buf[:n], err)
	}
}

// Layers that try to leave the root are refused, and nothing lands outside
// it; an absolute symlink is followed inside the root, as the guest would.
func TestUnpackRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []ociimg.Entry
		limit   int64
		want    string // in the error; "" = success
		inside  string // with success: this file exists under root
	}{
		{"dotdot name", []ociimg.Entry{{Name: "../../escape.txt", Body: "x"}}, 0, "climbs above the root", ""},
		{"dotdot inside name", []ociimg.Entry{{Name: "a/../../escape.txt", Body: "x"}}, 0, "climbs above the root", ""},
		{"relative symlink escape", []ociimg.Entry{{Name: "up", Type: tar.TypeSymlink, Link: "../../.."}, {Name: "up/escape.txt", Body: "x"}}, 0, "escapes the root", ""},
		{"nested symlink escape", []ociimg.Entry{{Name: "a/", Type: tar.TypeDir}, {Name: "a/up", Type: tar.TypeSymlink, Link: "../.."}}, 0, "escapes the root", ""},
		{"hard link outside", []ociimg.Entry{{Name: "h", Type: tar.TypeLink, Link: "../../etc/passwd"}}, 0, "climbs above the root", ""},
		{"hard link missing", []ociimg.Entry{{Name: "h", Type: tar.TypeLink, Link: "nope"}}, 0, "missing", ""},
		{"too big for the disk", []ociimg.Entry{{Name: "big", Size: 3 << 20}}, 2 << 20, "more than the disk", ""},
		{"absolute symlink stays inside", []ociimg.Entry{{Name: "abs", Type: tar.TypeSymlink, Link: "/"}, {Name: "abs/etc/x", Body: "x"}}, 0, "", "etc/x"},
		{"absolute symlink with dotdot stays inside", []ociimg.Entry{{Name: "abs", Type: tar.TypeSymlink, Link: "/tmp/../.."}, {Name: "abs/y", Body: "y"}}, 0, "", "y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outer := t.TempDir()
			root := filepath.Join(outer, "a", "b", "root")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			err := unpackImage(t, ociimg.Image(t, v1.Config{}, ociimg.Layer(t, tt.entries...)), root, tt.limit)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadImage)):
				t.Fatalf("error %v, want one with %q wrapping ErrBadImage", err, tt.want)
			}
			if tt.inside != "" {
				if _, err := os.Stat(filepath.Join(root, tt.inside)); err != nil {
					t.Errorf("%s not written inside the root: %v", tt.inside, err)
				}
			}
			filepath.Walk(outer, func(p string, fi os.FileInfo, err error) error {
				if err == nil && p != outer && !strings.HasPrefix(p, root) && !strings.HasPrefix(root, p) {
					t.Errorf("written outside the root: %s", p)
				}
				return nil
			})
		})
	}
}
