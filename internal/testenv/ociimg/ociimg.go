// Package ociimg builds real container images in-process for tests (no
// network, no docker): layers as tar streams, written as a docker archive,
// an OCI layout, an OCI archive, or pushed to go-containerregistry's
// in-process registry on loopback.
package ociimg

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one tar entry of a layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg (default), TypeDir, TypeSymlink, TypeLink, TypeChar
	Body     string
	Size     int64 // with Body empty: that many zero bytes, streamed
	Mode     int64 // default 0644 (files), 0755 (folders)
	Uid, Gid int
	Link     string
	Xattrs   map[string]string
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Layer makes a gzip'd layer from entries. Its tar is produced on demand
// (zero-filled bodies included), never held whole.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, entries)) }()
		return pr, nil
	})
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	return l
}

func writeTar(w io.Writer, entries []Entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Mode: e.Mode, Uid: e.Uid, Gid: e.Gid,
			Linkname: e.Link, ModTime: epoch, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		var body io.Reader
		if h.Typeflag == tar.TypeReg {
			if e.Body != "" {
				h.Size, body = int64(len(e.Body)), strings.NewReader(e.Body)
			} else {
				h.Size, body = e.Size, io.LimitReader(zeros{}, e.Size)
			}
		}
		if len(e.Xattrs) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range e.Xattrs {
				h.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Image stacks layers on an empty image and sets its config.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatalf("append layers: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatalf("config: %v", err)
	}
	return img
}

// Tag is the name images are written under.
const Tag = "zeish.test/img:latest"

// WriteDockerArchive writes img as `docker save` would, returns the path.
func WriteDockerArchive(t testing.TB, img v1.Image, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "docker.tar")
	tag, _ := name.NewTag(Tag)
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatalf("docker archive: %v", err)
	}
	return p
}

// WriteLayout writes img as an OCI image layout folder.
func WriteLayout(t testing.TB, img v1.Image, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "layout")
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatalf("layout: %v", err)
	}
	return p
}

// WriteOCIArchive writes img as a tar of an OCI image layout.
func WriteOCIArchive(t testing.TB, img v1.Image, dir string) string {
	t.Helper()
	return TarFolder(t, WriteLayout(t, img, t.TempDir()), filepath.Join(dir, "oci.tar"))
}

// TarFolder writes the folder src as the tar at p (an OCI archive, when
// src holds a layout: tests tamper with a layout's files, then tar it) and
// returns p.
func TarFolder(t testing.TB, src, p string) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if rel == "." {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.Open(path)
			if err != nil {
				return err
			}
			defer b.Close()
			_, err = io.Copy(tw, b)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatalf("tar %s: %v", src, err)
	}
	return p
}

// Registry serves go-containerregistry's in-process registry on loopback,
// requiring basic auth user:pass when user is set. It returns the host:port.
func Registry(t testing.TB, user, pass string) string {
	t.Helper()
	h := registry.New(registry.Logger(nopLogger()))
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="zeish-test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Push writes img to host's registry as repo:tag and returns the reference.
func Push(t testing.TB, img v1.Image, host, repo, user, pass string) string {
	t.Helper()
	ref := fmt.Sprintf("%s/%s:latest", host, repo)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if user != "" {
		auth = &authn.Basic{Username: user, Password: pass}
	}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// FileLayer returns entries installing a host file (e.g. a static busybox)
// at guestPath with mode.
func FileEntry(t testing.TB, hostPath, guestPath string, mode int64) Entry {
	t.Helper()
	b, err := os.ReadFile(hostPath)
	if err != nil {
		t.Fatal(err)
	}
	return Entry{Name: guestPath, Body: string(b), Mode: mode}
}

// NotATar is bytes that no image reader accepts.
var NotATar = bytes.Repeat([]byte("this is not an image\n"), 64)

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// Standard is the multi-layer image the template tests build from: a static
// busybox userland, then a second layer with a whiteout, an opaque folder, a
// hard link, a symlink, a setuid file, a file owned by uid 1000, an extended
// attribute and a device node (which the build skips). Its config sets Env,
// WorkingDir, User and Entrypoint/Cmd.
func Standard(t testing.TB) v1.Image {
	t.Helper()
	l1 := []Entry{
		{Name: "bin/", Type: tar.TypeDir},
		FileEntry(t, "/bin/busybox", "bin/busybox", 0o755),
	}
	for _, a := range []string{"sh", "ls", "cat", "stat", "id", "pwd", "env", "echo", "getfattr", "readlink", "test", "sleep", "touch", "whoami"} {
		l1 = append(l1, Entry{Name: "bin/" + a, Type: tar.TypeSymlink, Link: "busybox"})
	}
	l1 = append(l1,
		Entry{Name: "etc/", Type: tar.TypeDir},
		Entry{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"},
		Entry{Name: "etc/group", Body: "root:x:0:\napp:x:1000:\n"},
		Entry{Name: "data/", Type: tar.TypeDir},
		Entry{Name: "data/old/", Type: tar.TypeDir},
		Entry{Name: "data/old/keep.txt", Body: "kept\n"},
		Entry{Name: "data/old/gone.txt", Body: "whited out\n"},
		Entry{Name: "opq/", Type: tar.TypeDir},
		Entry{Name: "opq/lower.txt", Body: "hidden by the opaque dir\n"},
		Entry{Name: "opq/sub/", Type: tar.TypeDir},
		Entry{Name: "opq/sub/lower2.txt", Body: "hidden too\n"},
		Entry{Name: "home/", Type: tar.TypeDir},
		Entry{Name: "home/app/", Type: tar.TypeDir, Uid: 1000, Gid: 1000, Mode: 0o750},
	)
	l2 := []Entry{
		{Name: "data/old/.wh.gone.txt"},
		{Name: "opq/", Type: tar.TypeDir},
		{Name: "opq/.wh..wh..opq"},
		{Name: "opq/upper.txt", Body: "upper\n"},
		{Name: "data/hard", Type: tar.TypeLink, Link: "data/old/keep.txt"},
		{Name: "data/link", Type: tar.TypeSymlink, Link: "/data/old/keep.txt"},
		{Name: "usr/local/bin/", Type: tar.TypeDir},
		{Name: "usr/local/bin/suid", Body: "#!/bin/sh\necho suid\n", Mode: 0o4755},
		{Name: "home/app/owned.txt", Body: "mine\n", Uid: 1000, Gid: 1000, Mode: 0o640},
		{Name: "data/xattr.txt", Body: "x\n", Xattrs: map[string]string{"user.zeish": "yes"}},
		{Name: "dev/", Type: tar.TypeDir},
		{Name: "dev/evil", Type: tar.TypeChar, Mode: 0o666},
		{Name: "work/", Type: tar.TypeDir, Uid: 1000, Gid: 1000},
	}
	return Image(t, v1.Config{
		Env:        []string{"PATH=/usr/local/bin:/bin", "GREETING=hello from the image"},
		WorkingDir: "/work",
		User:       "app",
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"echo started > /tmp/started"},
	}, Layer(t, l1...), Layer(t, l2...))
}
