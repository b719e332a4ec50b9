package template_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
)

// loopbackGuard refuses what guests may not reach but loopback, where the
// tests' registries listen (ZEISH_REGISTRY_ALLOW_RANGES in a zeishd).
func loopbackGuard(t testing.TB) *dialguard.Guard {
	g, err := dialguard.New(network.DefaultBlocked, []string{"127.0.0.0/8", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func agentCopy(t *testing.T) string {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "sandboxd")
	b, err := os.ReadFile(staticBinary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return agent
}

// debugfs reads a file's metadata from the built ext4 disk without mounting it.
func debugfs(t *testing.T, raw, cmd string) string {
	t.Helper()
	out, err := exec.Command("/usr/sbin/debugfs", "-R", cmd, raw).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs %s: %v: %s", cmd, err, out)
	}
	return string(out)
}

// One image, four transports: the first builds, the other files find its
// build by what they unpack (config digest and diff_ids, all checked), and
// the registry pull has a build of its own (the cache scope: files are an
// account's, pulls are shared). The disk holds the image's files with their
// modes, owners and xattrs, zeish's agent beside them, and nothing replaced.
func TestBuildOCITransports(t *testing.T) {
	testskip.Short(t, "runs mkfs.ext4 and qemu-img")
	testenv.RequireQEMU(t)
	img := ociimg.Standard(t)
	dir := t.TempDir()
	host := ociimg.Registry(t, "alice", "s3cret")
	ref := ociimg.Push(t, img, host, "team/app", "alice", "s3cret")
	sources := []template.Source{
		{Transport: template.TransportDockerArchive, Ref: ociimg.WriteDockerArchive(t, img, dir)},
		{Transport: template.TransportOCI, Ref: ociimg.WriteLayout(t, img, dir)},
		{Transport: template.TransportOCIArchive, Ref: ociimg.WriteOCIArchive(t, img, dir)},
		{Transport: template.TransportRegistry, Ref: ref, Username: "alice", Password: "s3cret"},
	}
	cache := t.TempDir()
	base := template.BaseOptions{CacheDir: cache, SandboxdPath: agentCopy(t)}
	var first *template.Artifacts
	for _, src := range sources {
		t.Run(src.Transport, func(t *testing.T) {
			var steps []string
			a, err := template.BuildOCI(context.Background(), template.OCIOptions{Base: base, Source: src, DiskMiB: 256,
				Account: "acc_one", RegistryGuard: loopbackGuard(t),
				Progress: func(p template.Progress) { steps = append(steps, p.Step) }})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(steps, "done") {
				t.Errorf("no done step in %v", steps)
			}
			switch {
			case first == nil:
				first = a
				if !slices.Contains(steps, "layer") || !slices.Contains(steps, "disk") {
					t.Errorf("first build reported %v", steps)
				}
			case src.Transport == template.TransportRegistry:
				if a.Dir == first.Dir {
					t.Errorf("a registry pull shares the build of an account's files: %s", a.Dir)
				}
			case a.Dir != first.Dir:
				t.Errorf("same image built again: %s vs %s", a.Dir, first.Dir)
			}
			if !strings.HasPrefix(a.Image.ConfigDigest, "sha256:") || !strings.HasPrefix(a.Image.Digest, "sha256:") {
				t.Errorf("digests %q %q", a.Image.Digest, a.Image.ConfigDigest)
			}
			c := a.Image
			if c == nil || c.User != "app" || c.WorkingDir != "/work" || !slices.Contains(c.Env, "GREETING=hello from the image") ||
				strings.Join(c.StartCmd(), " ") != "/bin/sh -c echo started > /tmp/started" || a.DiskMiB != 256 {
				t.Errorf("image config %+v, disk %d", c, a.DiskMiB)
			}
		})
	}
	if first == nil {
		return
	}
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", first.BaseDisk, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v %s", err, out)
	}
	checks := []struct{ cmd, want string }{
		{"stat /usr/local/bin/suid", "Mode:  04755"},
		{"stat /home/app/owned.txt", "User:  1000   Group:  1000"},
		{"stat /home/app/owned.txt", "Mode:  0640"},
		{"stat /data/hard", "Links: 2"},
		{"stat /data/link", "Fast link dest: \"/data/old/keep.txt\""},
		{"ea_list /data/xattr.txt", "user.zeish"},
		{"stat /.zeish/sandboxd", "Mode:  0755"},
		{"ls /opq", "upper.txt"},
		{"ls /bin", "busybox"},
	}
	for _, c := range checks {
		if out := debugfs(t, raw, c.cmd); !strings.Contains(out, c.want) {
			t.Errorf("%s: want %q in\n%s", c.cmd, c.want, out)
		}
	}
	absent := []string{"/data/old/gone.txt", "/opq/lower.txt", "/dev/evil", "/sbin/init"}
	for _, p := range absent {
		if out := debugfs(t, raw, "stat "+p); !strings.Contains(out, "File not found") {
			t.Errorf("%s should not exist:\n%s", p, out)
		}
	}
}

// Bad sources and images fail with the reason, and leave nothing in the
// cache but lock files.
func TestBuildOCIBadInput(t *testing.T) {
	testskip.Short(t, "runs mkfs.ext4")
	testenv.RequireQEMU(t)
	dir := t.TempDir()
	notImage := filepath.Join(dir, "not-image.tar")
	os.WriteFile(notImage, ociimg.NotATar, 0o644)

	missingBlob := ociimg.WriteLayout(t, ociimg.Standard(t), t.TempDir())
	layers, _ := ociimg.Standard(t).Layers()
	d, _ := layers[1].Digest()
	os.Remove(filepath.Join(missingBlob, "blobs", d.Algorithm, d.Hex))

	host := ociimg.Registry(t, "alice", "s3cret")
	ref := ociimg.Push(t, ociimg.Standard(t), host, "team/app", "alice", "s3cret")

	big := ociimg.Image(t, v1.Config{}, ociimg.Layer(t, ociimg.Entry{Name: "big", Size: 80 << 20}))
	escape := ociimg.Image(t, v1.Config{}, ociimg.Layer(t,
		ociimg.Entry{Name: "up", Type: '2', Link: "../../../../tmp"}, ociimg.Entry{Name: "up/pwned", Body: "x"}))
	dotdot := ociimg.Image(t, v1.Config{}, ociimg.Layer(t, ociimg.Entry{Name: "../../pwned", Body: "x"}))

	tests := []struct {
		name string
		src  template.Source
		disk int
		is   error
		want string
	}{
		{"not an image (docker-archive)", template.Source{Transport: "docker-archive", Ref: notImage}, 0, template.ErrBadImage, "not a docker archive"},
		{"not an image (oci-archive)", template.Source{Transport: "oci-archive", Ref: notImage}, 0, template.ErrBadImage, "not an OCI archive"},
		{"not a layout", template.Source{Transport: "oci", Ref: dir}, 0, template.ErrBadImage, "not an OCI image layout"},
		{"missing file", template.Source{Transport: "docker-archive", Ref: filepath.Join(dir, "nope.tar")}, 0, template.ErrBadSource, "no such file"},
		{"missing blob", template.Source{Transport: "oci", Ref: missingBlob}, 0, template.ErrBadImage, d.Hex[:12]},
		{"registry 401 without credentials", template.Source{Transport: "registry", Ref: ref}, 0, template.ErrRegistryAuth, "401"},
		{"registry 401 wrong password", template.Source{Transport: "registry", Ref: ref, Username: "alice", Password: "no"}, 0, template.ErrRegistryAuth, "401"},
		{"layer larger than the disk", template.Source{Transport: "docker-archive", Ref: ociimg.WriteDockerArchive(t, big, t.TempDir())}, 64, template.ErrBadImage, "more than the disk"},
		{"escaping symlink", template.Source{Transport: "docker-archive", Ref: ociimg.WriteDockerArchive(t, escape, t.TempDir())}, 0, template.ErrBadImage, "escapes the root"},
		{"dotdot path", template.Source{Transport: "docker-archive", Ref: ociimg.WriteDockerArchive(t, dotdot, t.TempDir())}, 0, template.ErrBadImage, "climbs above the root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			_, err := template.BuildOCI(context.Background(), template.OCIOptions{
				Base: template.BaseOptions{CacheDir: cache, SandboxdPath: agentCopy(t)}, Source: tt.src, DiskMiB: tt.disk,
				RegistryGuard: loopbackGuard(t)})
			if err == nil || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %v mentioning %q", err, tt.is, tt.want)
			}
			entries, _ := os.ReadDir(cache)
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), ".lock") {
					t.Errorf("failed build left %s in the cache", e.Name())
				}
			}
			if _, err := os.Stat("/tmp/pwned"); err == nil {
				t.Errorf("a layer wrote /tmp/pwned")
			}
		})
	}
}

func TestParseSource(t *testing.T) {
	tests := []struct {
		in      string
		want    template.Source
		wantErr string
	}{
		{"docker-archive:./img.tar", template.Source{Transport: "docker-archive", Ref: "./img.tar"}, ""},
		{"oci:/x/layout", template.Source{Transport: "oci", Ref: "/x/layout"}, ""},
		{"oci-archive:x.tar", template.Source{Transport: "oci-archive", Ref: "x.tar"}, ""},
		{"registry:127.0.0.1:5000/a/b:tag", template.Source{Transport: "registry", Ref: "127.0.0.1:5000/a/b:tag"}, ""},
		{"docker:foo", template.Source{}, "unknown transport"},
		{"nocolon", template.Source{}, "TRANSPORT:REF"},
		{"registry:", template.Source{}, "TRANSPORT:REF"},
		{"registry:UPPER/Case::", template.Source{}, "registry"},
	}
	for _, tt := range tests {
		got, err := template.ParseSource(tt.in)
		if tt.wantErr != "" {
			if err == nil || !errors.Is(err, template.ErrBadSource) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %+v, %v", tt.in, got, err)
		}
	}
}
