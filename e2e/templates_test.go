package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// checkImageSandbox proves a sandbox booted from ociimg.Standard: the
// image's files with their modes and owners, the layers' whiteouts, opaque
// folder, hard link and symlink, the config's env, working folder and user
// as exec defaults, the start command run at boot, and a root filesystem
// grown to the sandbox's disk.
func checkImageSandbox(t *testing.T, conn *zeish.SandboxConn) {
	t.Helper()
	checks := []struct{ script, want string }{
		{"id -u; id -g", "1000\n1000\n"},
		{"pwd", "/work\n"},
		{"echo \"$GREETING|$PATH|$HOME\"", "hello from the image|/usr/local/bin:/bin|/home/app\n"},
		{"stat -c '%a %u:%g' /usr/local/bin/suid /home/app/owned.txt /home/app", "4755 0:0\n640 1000:1000\n750 1000:1000\n"},
		{"cat /home/app/owned.txt /data/link; readlink /data/link; stat -c %h /data/hard", "mine\nkept\n/data/old/keep.txt\n2\n"},
		{"ls /data/old /opq", "/data/old:\nkeep.txt\n\n/opq:\nupper.txt\n"},
		{"test -e /dev/evil && echo device-node-copied; test -e /sbin/init && echo init-added; echo ok", "ok\n"},
		// The start command runs in the background at boot: wait for it.
		{"i=0; while [ ! -s /tmp/started ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; cat /tmp/started; stat -c %u /tmp/started", "started\n1000\n"},
		// resize2fs (zeish's, beside the image's files) grows the 256 MiB
		// filesystem to the sandbox's disk in the background.
		{"i=0; while [ $(stat -f -c '%b' /) -lt 400000 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ $(stat -f -c '%b' /) -ge 400000 ] && echo grown", "grown\n"},
	}
	for _, c := range checks {
		out, errOut, res := run(t, conn, "sh", "-c", c.script)
		if out != c.want || res.ExitCode != 0 {
			t.Errorf("%s:\n got %q (exit %d, stderr %q)\nwant %q", c.script, out, res.ExitCode, errOut, c.want)
		}
	}
	// Files are written as the template's user unless told otherwise.
	ctx := ctxFor(t, time.Minute)
	if _, err := conn.WriteFile(ctx, "/work/mine.txt", strings.NewReader("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteFileAs(ctx, "/work/roots.txt", strings.NewReader("x"), 0o600, "root"); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, conn, "stat", "-c", "%U %a", "/work/mine.txt", "/work/roots.txt"); out != "app 600\nroot 600\n" {
		t.Errorf("owners of written files: %q", out)
	}
	var out bytes.Buffer
	res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"id", "-u"}, User: "root", Cwd: "/"}, &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "0\n" {
		t.Errorf("exec as root: %q %+v %v", out.String(), res, err)
	}
}

// loopbackRegistries opens loopback to template builds: the tests' own
// registries listen there (zeishd refuses it, as guests do, by default).
const loopbackRegistries = "ZEISH_REGISTRY_ALLOW_RANGES=127.0.0.0/8"

// TestTemplatesFromImages builds one multi-layer image four ways (a docker
// archive and an OCI archive uploaded by zeishctl, an OCI layout folder
// uploaded as a tar, a registry on loopback with basic auth), boots a
// sandbox from each and checks it from the inside. The templates are cold
// (TestWarmTemplate covers warm ones): these sandboxes boot from the image.
func TestTemplatesFromImages(t *testing.T) {
	s := startServer(t, loopbackRegistries)
	ctx := ctxFor(t, 20*time.Minute)
	// A layer of this run's own: builds are cached by image digest across
	// runs, and the progress a build reports can only be checked on a real one.
	img, err := mutate.AppendLayers(ociimg.Standard(t), ociimg.Layer(t, ociimg.Entry{Name: "run-id", Body: sandbox.NewID("run_")}))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	host := ociimg.Registry(t, "alice", "s3cret")
	ref := ociimg.Push(t, img, host, "team/app", "alice", "s3cret")
	sources := []struct{ name, from, stdin string }{
		{"docker", "docker-archive:" + ociimg.WriteDockerArchive(t, img, dir), ""},
		{"layout", "oci:" + ociimg.WriteLayout(t, img, dir), ""},
		{"ociarchive", "oci-archive:" + ociimg.WriteOCIArchive(t, img, dir), ""},
		{"registry", "registry:" + ref, "s3cret\n"},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			args := []string{"templates", "build", "--name", "img-" + src.name, "--from", src.from, "--disk-mib", "256", "--cold", "-o", "json"}
			if src.stdin != "" {
				args = append(args, "--username", "alice", "--password-stdin")
			}
			out, errOut, code := s.zeishctl(t, src.stdin, args...)
			if code != 0 {
				t.Fatalf("templates build: exit %d: %s\n%s", code, errOut, out)
			}
			var tpl sandbox.Template
			if err := json.Unmarshal([]byte(out), &tpl); err != nil {
				t.Fatalf("build -o json: %v: %q", err, out)
			}
			if tpl.State != sandbox.TemplateReady || tpl.User != "app" || tpl.WorkingDir != "/work" || tpl.DiskMiB != 256 ||
				!strings.HasPrefix(tpl.Digest, "sha256:") || len(tpl.StartCmd) != 3 {
				t.Fatalf("template %+v", tpl)
			}
			if !strings.Contains(errOut, "layer") && src.name == "docker" {
				t.Errorf("no layer progress on stderr: %q", errOut)
			}
			sb, err := s.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "img-" + src.name, MemoryMiB: 256}, zeish.Wait())
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != sandbox.StateRunning || sb.Template != tpl.ID {
				t.Fatalf("sandbox %s: %s (%s), template %q", sb.ID, sb.State, sb.StateReason, sb.Template)
			}
			conn, err := s.client.Connect(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			checkImageSandbox(t, conn)
			if _, err := s.client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The build log stays readable after the build.
	var events []zeish.TemplateEvent
	if err := s.client.TemplateEvents(ctx, "img-docker", func(e zeish.TemplateEvent) error { events = append(events, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(events) < 3 || events[len(events)-1].Type != "state" || events[len(events)-1].Template.State != sandbox.TemplateReady {
		t.Errorf("build log after the build: %+v", events)
	}
	out, _, code := s.zeishctl(t, "", "templates", "list")
	if code != 0 || !strings.Contains(out, "img-registry") || !strings.Contains(out, "base") {
		t.Errorf("templates list: %d %q", code, out)
	}
}

// TestTemplateBadInput: bad requests are refused with 4xx and change
// nothing; bad images end in state error with the reason; templates are
// invisible to other accounts; a template in use can be deleted, and its
// files go with its last sandbox.
func TestTemplateBadInput(t *testing.T) {
	s := startServer(t, loopbackRegistries)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	dir := t.TempDir()

	// Refused at the edge.
	edge := []struct {
		name string
		req  zeish.BuildTemplateRequest
		code string
	}{
		{"unknown transport", zeish.BuildTemplateRequest{Name: "x1", From: "docker:foo"}, errdefs.ErrInvalidArgument.Code},
		{"bad name", zeish.BuildTemplateRequest{Name: "Bad_Name", From: "registry:127.0.0.1:1/a:b"}, errdefs.ErrInvalidArgument.Code},
		{"built-in name", zeish.BuildTemplateRequest{Name: "base", From: "registry:127.0.0.1:1/a:b"}, errdefs.ErrNameTaken.Code},
		{"disk too small", zeish.BuildTemplateRequest{Name: "x2", From: "registry:127.0.0.1:1/a:b", DiskMiB: 8}, errdefs.ErrInvalidArgument.Code},
	}
	for _, e := range edge {
		_, err := c.BuildTemplate(ctx, e.req)
		var apiErr *zeish.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != e.code {
			t.Errorf("%s: %v, want %s", e.name, err, e.code)
		}
	}
	// A non-admin account may not name files on the server, and sees no
	// other account's template.
	acct, err := c.CreateAccount(ctx, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.CreateAPIKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	other := zeish.NewClient(s.url(), key.Key)
	archive := ociimg.WriteDockerArchive(t, ociimg.Standard(t), dir)
	_, err = other.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "x3", From: "docker-archive:" + archive})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("tenant naming a server path: %v", err)
	}
	if list, _ := c.ListTemplates(ctx); len(list) != 1 || list[0].Name != "base" || !list[0].Builtin {
		t.Errorf("templates after refused builds: %+v", list)
	}

	// Bad images fail their build with the reason.
	host := ociimg.Registry(t, "alice", "s3cret")
	ref := ociimg.Push(t, ociimg.Standard(t), host, "team/app", "alice", "s3cret")
	notImage := filepath.Join(dir, "junk.tar")
	os.WriteFile(notImage, ociimg.NotATar, 0o644)
	escape := ociimg.Image(t, v1.Config{}, ociimg.Layer(t,
		ociimg.Entry{Name: "up", Type: '2', Link: "../../../../../tmp"}, ociimg.Entry{Name: "up/zeish-pwned", Body: "x"}))
	big := ociimg.Image(t, v1.Config{}, ociimg.Layer(t, ociimg.Entry{Name: "big", Size: 100 << 20}))
	failing := []struct{ name, from, want string }{
		{"junk", "docker-archive:" + notImage, "not a docker archive"},
		{"escape", "docker-archive:" + ociimg.WriteDockerArchive(t, escape, t.TempDir()), "escapes the root"},
		{"big", "docker-archive:" + ociimg.WriteDockerArchive(t, big, t.TempDir()), "more than the disk"},
		{"noauth", "registry:" + ref, "401"},
	}
	for _, f := range failing {
		tpl, err := c.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "bad-" + f.name, DiskMiB: 64}, f.from)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if tpl.State != sandbox.TemplateBuilding {
			t.Errorf("%s: answered in state %s", f.name, tpl.State)
		}
		tpl, err = c.WaitTemplate(ctx, tpl.ID, nil)
		if err != nil || tpl.State != sandbox.TemplateError || !strings.Contains(tpl.StateReason, f.want) {
			t.Errorf("%s: %s %q %v, want error mentioning %q", f.name, tpl.State, tpl.StateReason, err, f.want)
		}
		_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl.ID})
		if !errors.Is(err, errdefs.ErrInvalidState) {
			t.Errorf("%s: create from a failed template: %v", f.name, err)
		}
	}
	if _, err := os.Stat("/tmp/zeish-pwned"); err == nil {
		t.Errorf("a layer wrote outside its root")
	}

	// A unique image, so its build folder is this test's alone.
	salt := make([]byte, 8)
	rand.Read(salt)
	l, _ := ociimg.Standard(t).Layers()
	unique := ociimg.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, append(l, ociimg.Layer(t, ociimg.Entry{Name: "salt", Body: hex.EncodeToString(salt)}))...)
	tpl, err := c.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "mine", DiskMiB: 128, Cold: true}, "docker-archive:"+ociimg.WriteDockerArchive(t, unique, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err = c.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.State != sandbox.TemplateReady {
		t.Fatalf("build: %+v %v", tpl, err)
	}
	if _, err := other.GetTemplate(ctx, tpl.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other account GET: %v", err)
	}
	if _, err := other.DeleteTemplate(ctx, tpl.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other account DELETE: %v", err)
	}
	if _, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl.ID}); !errors.Is(err, errdefs.ErrUnknownTemplate) {
		t.Errorf("other account create from it: %v", err)
	}
	if _, err := c.DeleteTemplate(ctx, "base"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("delete base: %v", err)
	}
	files := filepath.Join(s.templateCache(t), "oci-"+tpl.Hash[:24])
	if _, err := os.Stat(files); err != nil {
		t.Fatalf("template files: %v", err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "mine", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	if _, err := c.DeleteTemplate(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTemplate(ctx, "mine"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted template still answers: %v", err)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res := run(t, conn, "cat", "/salt"); res.ExitCode != 0 || out != hex.EncodeToString(salt) {
		t.Errorf("sandbox of a deleted template: %q %+v", out, res)
	}
	if _, err := os.Stat(files); err != nil {
		t.Errorf("files removed while a sandbox uses them: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	// The catalog sweeps every few seconds.
	for i := 0; i < 300; i++ {
		if _, err := os.Stat(files); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("template files %s still there after its last sandbox was deleted", files)
}

// templateCache is where the server keeps built templates.
func (s *server) templateCache(t *testing.T) string {
	t.Helper()
	return filepath.Dir(testenv.BaseTemplate(t).Dir)
}

// TestTemplateBuildSurvivesRestart stops zeishd right after a build was
// accepted: the next zeishd builds it again from the kept upload, and the
// log says so.
func TestTemplateBuildSurvivesRestart(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	// Big enough (unpacking 600 MiB) that the build is still running when
	// zeishd gets its SIGTERM a moment after the 202.
	l, _ := ociimg.Standard(t).Layers()
	img := ociimg.Image(t, v1.Config{}, append(l, ociimg.Layer(t, ociimg.Entry{Name: "big", Size: 600 << 20}))...)
	archive := ociimg.WriteDockerArchive(t, img, t.TempDir())
	tpl, err := s.client.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "survivor", DiskMiB: 1024}, "docker-archive:"+archive)
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	s.start()
	var msgs []string
	got, err := s.client.WaitTemplate(ctx, tpl.ID, func(e zeish.TemplateEvent) { msgs = append(msgs, e.Message) })
	if err != nil || got.State != sandbox.TemplateReady {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "zeishd restarted: building again") {
		t.Errorf("build log does not show the resume:\n%s", strings.Join(msgs, "\n"))
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "template-builds", tpl.ID, "image.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upload kept after the build: %v", err)
	}
	if _, err := s.client.DeleteTemplate(ctx, tpl.ID); err != nil {
		t.Fatal(err)
	}
}
