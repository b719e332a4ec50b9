package e2e

import (
	"archive/tar"
	"crypto/rand"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestTenantCannotPoisonAnotherTenantsTemplate is issue 27's first finding
// end to end, with two accounts and one real build each way:
//
//   - B uploads an OCI archive holding a public image's real manifest with
//     its own config and layer stored under the real digests. Its build
//     fails (bad_image): every blob is checked against its digest.
//   - A then builds that image from a registry (served by this test on
//     loopback, opened for this zeishd only to 127.0.0.1): A's template
//     has the real image's start command and digests, and A's sandbox
//     reads the real image's file, never B's.
//   - B uploading the genuine image builds, but only for B: its template is
//     not A's build (the cache scope keeps uploads to their account).
//   - A pull from a registry on IPv6 loopback (::1, not opened), which the
//     registry client would otherwise pull from over plain HTTP, fails
//     with registry_blocked: builds do not reach inside the network.
//   - An upload past what B's template bytes quota has left is cut while
//     it streams: 413 upload_too_large, and nothing is recorded.
//
// Before the fix, B's build succeeded under the real manifest's digest and
// A's pull found it in the shared cache: A's sandbox read B's file.
func TestTenantCannotPoisonAnotherTenantsTemplate(t *testing.T) {
	s := startServer(t, "ZEISH_REGISTRY_ALLOW_RANGES=127.0.0.1/32", "ZEISH_PLAN_TEMPLATE_MIB=16")
	ctx := ctxFor(t, 15*time.Minute)
	tenant := func(name string) *zeish.Client {
		acct, err := s.client.CreateAccount(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		key, err := s.client.CreateAPIKey(ctx, acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		return zeish.NewClient(s.url(), key.Key, zeish.WithHTTPClient(&http.Client{Transport: newValidatingTransport(t)}))
	}
	a, b := tenant("tenant-a"), tenant("tenant-b")

	// The real image and B's: one userland layer (a static busybox) they
	// share, and a marker layer and start command of their own. The run
	// id keeps this run's builds out of the shared template cache's way.
	runID := sandbox.NewID("run_")
	userland := ociimg.Layer(t, ociimg.Entry{Name: "bin/", Type: tar.TypeDir}, ociimg.FileEntry(t, "/bin/busybox", "bin/busybox", 0o755),
		ociimg.Entry{Name: "bin/sh", Type: tar.TypeSymlink, Link: "busybox"}, ociimg.Entry{Name: "bin/cat", Type: tar.TypeSymlink, Link: "busybox"})
	image := func(who string) v1.Image {
		return ociimg.Image(t, v1.Config{Cmd: []string{"/bin/sh", "-c", "echo " + who}, Env: []string{"PATH=/bin"}},
			userland, ociimg.Layer(t, ociimg.Entry{Name: "marker", Body: who + " " + runID + "\n"}))
	}
	real, evil := image("real"), image("evil")
	host := ociimg.Registry(t, "", "")
	ref := ociimg.Push(t, real, host, "public/app", "", "")

	// B: the real manifest over B's config and marker layer.
	layout := ociimg.WriteLayout(t, real, t.TempDir())
	store := func(d v1.Hash, raw []byte) {
		if err := os.WriteFile(filepath.Join(layout, "blobs", d.Algorithm, d.Hex), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	realCfg, _ := real.ConfigName()
	evilCfg, _ := evil.RawConfigFile()
	store(realCfg, evilCfg)
	realLayers, _ := real.Layers()
	evilLayers, _ := evil.Layers()
	realMarker, _ := realLayers[1].Digest()
	rc, _ := evilLayers[1].Compressed()
	evilMarker, _ := io.ReadAll(rc)
	rc.Close()
	store(realMarker, evilMarker)
	crafted := ociimg.TarFolder(t, layout, filepath.Join(t.TempDir(), "crafted.tar"))
	poisoned, err := b.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "crafted", DiskMiB: 64, Cold: true}, "oci-archive:"+crafted)
	if err != nil {
		t.Fatal(err)
	}
	if poisoned, err = b.WaitTemplate(ctx, poisoned.ID, nil); err != nil {
		t.Fatal(err)
	}

	// A: the real image, from the registry.
	tpl, err := a.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "app", From: "registry:" + ref, DiskMiB: 64, Cold: true})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err = a.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.State != sandbox.TemplateReady {
		t.Fatalf("A's build: %+v %v", tpl, err)
	}
	realDigest, _ := real.Digest()
	if !slices.Equal(tpl.StartCmd, []string{"/bin/sh", "-c", "echo real"}) || tpl.Digest != realDigest.String() || tpl.ConfigDigest != realCfg.String() {
		t.Errorf("A's template: start %q, digest %s, config %s; want the real image's (%s, %s)", tpl.StartCmd, tpl.Digest, tpl.ConfigDigest, realDigest, realCfg)
	}
	sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "app", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("A's sandbox: %+v %v", sb, err)
	}
	conn, err := a.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, res := run(t, conn, "/bin/cat", "/marker"); out != "real "+runID+"\n" || res.ExitCode != 0 {
		t.Errorf("A's sandbox reads %q (%s, exit %d), want the real image's marker", out, errOut, res.ExitCode)
	}
	if _, err := a.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}

	// B's crafted build failed, and said why.
	if poisoned.State != sandbox.TemplateError || poisoned.ErrorCode != sandbox.TemplateBadImage || !strings.Contains(poisoned.StateReason, "does not match its digest") {
		t.Errorf("B's crafted build: %s %q %q, want error bad_image", poisoned.State, poisoned.ErrorCode, poisoned.StateReason)
	}

	// B's genuine upload builds, and only for B.
	genuine, err := b.BuildTemplateFrom(ctx, zeish.BuildTemplateRequest{Name: "genuine", DiskMiB: 64, Cold: true},
		"oci-archive:"+ociimg.WriteOCIArchive(t, real, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if genuine, err = b.WaitTemplate(ctx, genuine.ID, nil); err != nil || genuine.State != sandbox.TemplateReady {
		t.Fatalf("B's genuine upload: %+v %v", genuine, err)
	}
	if genuine.ConfigDigest != tpl.ConfigDigest || genuine.Hash == tpl.Hash {
		t.Errorf("B's genuine upload: config %s (A's %s), build %s (A's %s): want the same image in a build of its own",
			genuine.ConfigDigest, tpl.ConfigDigest, genuine.Hash, tpl.Hash)
	}

	// An upload past B's quota (16 MiB, about 1 MiB held) is cut as it streams.
	_, err = b.UploadTemplate(ctx, zeish.BuildTemplateRequest{Name: "huge", From: "docker-archive"}, io.LimitReader(rand.Reader, 32<<20))
	var apiErr *zeish.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusRequestEntityTooLarge || !errors.Is(err, errdefs.ErrUploadTooLarge) {
		t.Errorf("a 32 MiB upload against 16 MiB: %v", err)
	}
	if list, _ := b.ListTemplates(ctx); slices.ContainsFunc(list, func(t zeish.Template) bool { return t.Name == "huge" }) {
		t.Errorf("the refused upload was recorded")
	}

	// A registry inside the network, not opened: refused at the dial.
	inside := serveRegistryOn(t, "[::1]:0")
	ociimg.Push(t, real, inside, "public/app", "", "")
	blocked, err := a.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "inside", From: "registry:" + inside + "/public/app:latest", DiskMiB: 64, Cold: true})
	if err != nil {
		t.Fatal(err)
	}
	if blocked, err = a.WaitTemplate(ctx, blocked.ID, nil); err != nil || blocked.State != sandbox.TemplateError || blocked.ErrorCode != sandbox.TemplateRegistryBlocked {
		t.Errorf("a pull from [::1]: %s %q %q %v, want error registry_blocked", blocked.State, blocked.ErrorCode, blocked.StateReason, err)
	}
}

// serveRegistryOn serves an in-process registry on addr; it returns host:port.
func serveRegistryOn(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return l.Addr().String()
}
