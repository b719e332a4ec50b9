package catalog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

func guard(t *testing.T, allow ...string) *dialguard.Guard {
	t.Helper()
	g, err := dialguard.New(network.DefaultBlocked, allow)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A registry that accepts a pull and never answers fails its build at the
// deadline with error_code build_timeout, and the build slot it held goes
// to the next build (issue 27: builds had no deadline, and two such pulls
// held both slots for good).
func TestStalledBuildTimesOut(t *testing.T) {
	testenv.RequireQEMU(t)
	c, dir := newTestCatalog(t)
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stall }))
	defer srv.Close()
	defer close(stall) // first: lets the handlers return so Close can
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.StartBuilds(ctx, BuildOptions{Dir: filepath.Join(dir, "builds"), Parallel: 1, Timeout: 10 * time.Second, // the build behind it must fit too: mkfs under -race on a busy host takes seconds
		RegistryGuard: guard(t, "127.0.0.0/8")}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stalled, err := c.Build(ctx, BuildRequest{AccountID: "acc_x", Name: "stalled", DiskMiB: 64,
		Source: template.Source{Transport: template.TransportRegistry, Ref: strings.TrimPrefix(srv.URL, "http://") + "/silent/image:latest"}})
	if err != nil {
		t.Fatal(err)
	}
	archive := ociimg.WriteDockerArchive(t, ociimg.Image(t, ociimgConfig, ociimg.Layer(t, ociimg.Entry{Name: "f", Body: "x"})), dir)
	next, err := c.Build(ctx, BuildRequest{AccountID: "acc_x", Name: "next", DiskMiB: 64,
		Source: template.Source{Transport: template.TransportDockerArchive, Ref: archive}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitSettled(t, c, stalled.ID)
	if got.State != sandbox.TemplateError || got.ErrorCode != sandbox.TemplateBuildTimeout || !strings.Contains(got.StateReason, "ZEISH_TEMPLATE_BUILD_TIMEOUT") {
		t.Errorf("stalled build: %s %q %q", got.State, got.ErrorCode, got.StateReason)
	}
	if got := waitSettled(t, c, next.ID); got.State != sandbox.TemplateReady {
		t.Errorf("the build behind it: %s %q", got.State, got.StateReason)
	}
}

// A registry reference may not aim a build inside the network: a host in a
// range guests may not reach (loopback here, by address or by a name that
// resolves there) fails with registry_blocked before anything is read,
// unless ZEISH_REGISTRY_ALLOW_RANGES opens it (issue 27: builds pulled
// from loopback, RFC 1918 and link-local hosts). An image past the
// account's template bytes fails with template_quota_reached.
func TestRegistryPullsAreContained(t *testing.T) {
	testenv.RequireQEMU(t)
	host := ociimg.Registry(t, "", "")
	img := ociimg.Image(t, ociimgConfig, ociimg.Layer(t, ociimg.Entry{Name: "f", Body: "x"}))
	ref := ociimg.Push(t, img, host, "internal/secret", "", "")
	_, port, _ := strings.Cut(host, ":")
	for _, tc := range []struct {
		name  string
		ref   string
		allow []string
		quota int64 // template bytes per account
		code  string
	}{
		{"loopback address", ref, nil, 0, sandbox.TemplateRegistryBlocked},
		{"name resolving to loopback", "localhost:" + port + "/internal/secret:latest", nil, 0, sandbox.TemplateRegistryBlocked},
		{"loopback opened", ref, []string{"127.0.0.0/8"}, 0, ""},
		// Not a range at all: an image whose layers pass the account's
		// template bytes fails before they are read.
		{"layers past the bytes quota", ref, []string{"127.0.0.0/8"}, 16, sandbox.TemplateQuota},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := newTestCatalog(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := c.StartBuilds(ctx, BuildOptions{Dir: filepath.Join(dir, "builds"), RegistryGuard: guard(t, tc.allow...),
				Quota: Quota{Bytes: tc.quota}}); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tpl, err := c.Build(ctx, BuildRequest{AccountID: "acc_x", Name: "pull", DiskMiB: 64,
				Source: template.Source{Transport: template.TransportRegistry, Ref: tc.ref}})
			if err != nil {
				t.Fatal(err)
			}
			got := waitSettled(t, c, tpl.ID)
			switch {
			case tc.code == "" && got.State != sandbox.TemplateReady:
				t.Errorf("build: %s %q", got.State, got.StateReason)
			case tc.code != "" && (got.State != sandbox.TemplateError || got.ErrorCode != tc.code || !strings.Contains(got.StateReason, "ZEISH_")):
				t.Errorf("build: %s %q %q, want %s", got.State, got.ErrorCode, got.StateReason, tc.code)
			}
		})
	}
}

// Per-account quotas are checked before an upload is stored: the count of
// templates, the bytes of images (an upload's counted as it streams) and
// the uploads streaming at once. A refused build leaves nothing (issue 27:
// uploads of up to 32 GiB each were stored with no bound).
func TestTemplateQuotas(t *testing.T) {
	c, dir := newTestCatalog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	builds := filepath.Join(dir, "builds")
	if err := c.StartBuilds(ctx, BuildOptions{Dir: builds, Parallel: 1, Quota: Quota{Templates: 3, Bytes: 1 << 20, Uploads: 1}}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.b.sem <- struct{}{} // hold the only build slot: accepted builds wait, uploads stay stored
	defer func() { <-c.b.sem }()
	upload := func(name string, body io.Reader) (sandbox.Template, error) {
		return c.Build(ctx, BuildRequest{AccountID: "acc_x", Name: name, DiskMiB: 64,
			Source: template.Source{Transport: template.TransportDockerArchive}, Upload: body})
	}
	pull := func(account, name string) (sandbox.Template, error) {
		return c.Build(ctx, BuildRequest{AccountID: account, Name: name, DiskMiB: 64,
			Source: template.Source{Transport: template.TransportRegistry, Ref: "registry.invalid/a:b"}})
	}
	left := func() []string {
		entries, _ := os.ReadDir(builds)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	// Bytes: an upload past what is left is cut as it streams.
	if _, err := upload("huge", bytes.NewReader(make([]byte, 2<<20))); !errors.Is(err, errdefs.ErrUploadTooLarge) {
		t.Errorf("2 MiB upload against 1 MiB: %v", err)
	}
	if got := left(); len(got) != 0 {
		t.Errorf("a refused upload left %v", got)
	}
	first, err := upload("first", bytes.NewReader(make([]byte, 600<<10)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := upload("second", bytes.NewReader(make([]byte, 600<<10))); !errors.Is(err, errdefs.ErrUploadTooLarge) {
		t.Errorf("600 KiB more with 600 KiB held of 1 MiB: %v", err)
	}

	// Uploads at once: one streams, the next is refused at once.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { _, err := upload("slow", pr); done <- err }()
	pw.Write(make([]byte, 1024)) // the first upload is streaming now
	if _, err := upload("parallel", bytes.NewReader([]byte("x"))); !errors.Is(err, errdefs.ErrTooManyUploads) {
		t.Errorf("a second upload at once: %v", err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Count: first and slow are kept; one more, then none.
	if _, err := pull("acc_x", "third"); err != nil {
		t.Fatal(err)
	}
	if _, err := pull("acc_x", "fourth"); !errors.Is(err, errdefs.ErrTemplateQuota) {
		t.Errorf("a fourth template of 3: %v", err)
	}
	if _, err := pull("acc_y", "other"); err != nil {
		t.Errorf("another account's quota is its own: %v", err)
	}
	if _, err := c.Delete(ctx, "acc_x", first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pull("acc_x", "fourth"); err != nil {
		t.Errorf("after a delete: %v", err)
	}
	all, _ := c.store.ListTemplates(ctx)
	for _, tpl := range all {
		if tpl.Name == "huge" || tpl.Name == "second" || tpl.Name == "parallel" {
			t.Errorf("a refused build was recorded: %+v", tpl)
		}
	}
}

var ociimgConfig = v1.Config{Cmd: []string{"/f"}}
