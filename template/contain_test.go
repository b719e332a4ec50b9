package template

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/zeish/zeish/internal/testenv/ociimg"
)

// outsideTree describes every file under outer except root's own subtree:
// type, mode, size, mtime, link target and content. Two descriptions are
// equal when nothing outside the root was created, changed or removed.
func outsideTree(t testing.TB, outer, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(outer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out[p] = "error " + err.Error()
			return nil
		}
		if p == root {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			out[p] = "error " + err.Error()
			return nil
		}
		desc := fi.Mode().String() + " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		out[p] = desc
		return nil
	})
	return out
}

func diffTrees(before, after map[string]string) []string {
	var d []string
	for p, b := range before {
		if a, ok := after[p]; !ok {
			d = append(d, "removed "+p)
		} else if a != b {
			d = append(d, "changed "+p+": "+b+" => "+a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			d = append(d, "created "+p)
		}
	}
	return d
}

// sentinelTree makes outer/a/b/root and files beside it at every level,
// with old mtimes, so that a write, a removal or a touch outside shows.
func sentinelTree(t testing.TB) (outer, root string) {
	t.Helper()
	outer = t.TempDir()
	root = filepath.Join(outer, "a", "b", "root")
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, d := range []string{"a/b/root", "hostetc", "target/sub", "a/b/sib"} {
		if err := os.MkdirAll(filepath.Join(outer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"sentinel", "a/sentinel", "a/b/sentinel", "hostetc/passwd", "target/sub/file", "a/b/sib/file"} {
		if err := os.WriteFile(filepath.Join(outer, f), []byte("sentinel "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	filepath.WalkDir(outer, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != root {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	return outer, root
}

var testInputs = &inputs{Sandboxd: []byte("agent"), Resize2fs: []hostFile{{GuestPath: "/sbin/resize2fs", Data: []byte("r")}}}

// An image cannot create, change or remove anything outside its root, by
// unpacking or by the agent's injection, whatever links its layers hold.
// Each case is a finding of issue 27: injectAgent followed an image's etc
// symlink (absolute, or relative behind a symlinked parent that
// checkSymlink did not see); a whiteout named ".wh..." removed the root's
// parent; finish set mtimes through a folder a later layer had replaced
// with a symlink.
func TestImageStaysInItsRoot(t *testing.T) {
	cases := []struct {
		name   string
		layers func(outer string) [][]ociimg.Entry
		want   string // in the error; "" = the build goes on
	}{
		{"etc is an absolute symlink to a host folder", func(outer string) [][]ociimg.Entry {
			return [][]ociimg.Entry{{{Name: "etc", Type: tar.TypeSymlink, Link: filepath.Join(outer, "hostetc")}}}
		}, ""},
		{"etc is a relative symlink behind a symlinked parent", func(outer string) [][]ociimg.Entry {
			return [][]ociimg.Entry{{
				{Name: "d1/d2/d3", Type: tar.TypeSymlink, Link: "/"},
				{Name: "d1/d2/d3/etc", Type: tar.TypeSymlink, Link: "../../../hostetc"},
			}}
		}, "escapes the root"},
		{"whiteout of the parent at the top", func(string) [][]ociimg.Entry {
			return [][]ociimg.Entry{{{Name: "f", Body: "x"}}, {{Name: ".wh..."}}}
		}, "names no entry"},
		{"whiteout of the folder itself", func(string) [][]ociimg.Entry {
			return [][]ociimg.Entry{{{Name: "sub/f", Body: "x"}}, {{Name: "sub/.wh.."}}}
		}, "names no entry"},
		{"folder mtime through a parent replaced by a symlink", func(outer string) [][]ociimg.Entry {
			return [][]ociimg.Entry{
				{{Name: "d/", Type: tar.TypeDir}, {Name: "d/sub/", Type: tar.TypeDir}},
				{{Name: "d", Type: tar.TypeSymlink, Link: filepath.Join(outer, "target")}},
			}
		}, ""},
		{"files through an absolute symlink to the host", func(outer string) [][]ociimg.Entry {
			return [][]ociimg.Entry{{
				{Name: "up", Type: tar.TypeSymlink, Link: outer},
				{Name: "up/sentinel", Body: "overwritten"},
				{Name: "up/a/.wh.sentinel"},
				{Name: "up/new", Type: tar.TypeLink, Link: "up/sentinel"},
			}}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outer, root := sentinelTree(t)
			before := outsideTree(t, outer, root)
			var layers []v1.Layer
			for _, l := range c.layers(outer) {
				layers = append(layers, ociimg.Layer(t, l...))
			}
			err := unpackImage(t, ociimg.Image(t, v1.Config{}, layers...), root, 0)
			if err == nil {
				err = injectAgent(root, testInputs)
			}
			switch {
			case c.want == "" && err != nil:
				t.Errorf("build failed: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrBadImage)):
				t.Errorf("error %v, want ErrBadImage with %q", err, c.want)
			}
			if d := diffTrees(before, outsideTree(t, outer, root)); len(d) > 0 {
				t.Errorf("outside the root:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// The agent's files land where the guest will look for them: through the
// image's own etc symlink, inside the root.
func TestInjectFollowsLinksInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	img := ociimg.Image(t, v1.Config{}, ociimg.Layer(t,
		ociimg.Entry{Name: "usr/etc/", Type: tar.TypeDir},
		ociimg.Entry{Name: "etc", Type: tar.TypeSymlink, Link: "/usr/etc"},
		ociimg.Entry{Name: "usr/etc/hosts", Body: "mine\n"}))
	if err := unpackImage(t, img, root, 0); err != nil {
		t.Fatal(err)
	}
	if err := injectAgent(root, testInputs); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"usr/etc/hosts": "mine\n", "usr/etc/hostname": "zeish\n", ".zeish/sandboxd": "agent", ".zeish/resize2fs": "r"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", f, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("tmp: %v %v", fi.Mode(), err)
	}
}

var _ = io.EOF
