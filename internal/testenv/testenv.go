// Package testenv gives tests the expensive shared fixtures: the static guest
// agent and the base template, built once and cached across test processes
// and packages, and the rule for skipping VM tests. It also runs a real
// zeishd for the end-to-end tests and the bench.
package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
)

// DefaultCacheDir is where fixtures live unless ZEISH_TEST_CACHE says
// otherwise. /var/tmp survives reboots and is not cleaned per test run.
const DefaultCacheDir = "/var/tmp/zeish-test-cache"

// CacheDir is the shared fixture cache folder.
func CacheDir() string {
	if d := os.Getenv("ZEISH_TEST_CACHE"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// RequireQEMU skips the test when QEMU is not installed, except under CI
// (env CI set), where a missing QEMU fails the test: CI must never pass by
// silently skipping the VM tests.
func RequireQEMU(t testing.TB) {
	t.Helper()
	var missing []string
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	testskip.Skip(t, "%s not found (apt-get install qemu-system-x86 qemu-utils)", strings.Join(missing, ", "))
}

// SandboxdBinary builds ./cmd/sandboxd once per process and returns its path.
func SandboxdBinary(t testing.TB) string {
	t.Helper()
	return GoBuildStatic(t, "./cmd/sandboxd")
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // package path -> *buildResult

// GoBuildStatic builds a main package of this module (a path relative to the
// module root, like "./cmd/sandboxd") as a static linux/amd64 binary, once per
// process, into the shared cache, and returns its path. The flags make the
// bytes depend only on the source, so template hashes stay stable between
// runs and the template cache keeps hitting.
func GoBuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	path, err := BuildStatic(pkg)
	if err != nil {
		t.Fatalf("build %s: %v", pkg, err)
	}
	return path
}

// BuildStatic is GoBuildStatic for a program without a testing.TB, like the
// bench: its sandboxd must hash like the tests' to share their template cache.
func BuildStatic(pkg string) (string, error) {
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() { r.path, r.err = goBuildStatic(pkg) })
	return r.path, r.err
}

func goBuildStatic(pkg string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(CacheDir(), "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root + "\x00" + pkg))
	out := filepath.Join(binDir, filepath.Base(pkg)+"-"+hex.EncodeToString(sum[:6]))
	// Build next to the target and rename: other test processes may be
	// reading (hashing) the current file at this moment.
	tmp, err := os.CreateTemp(binDir, ".build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", tmp.Name(), pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// moduleRoot is the folder holding go.mod; tests run in their package folder.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the zeish module")
	}
	return filepath.Dir(gomod), nil
}

var baseOnce struct {
	sync.Mutex
	byAgent map[string]*template.Artifacts
}

// BaseTemplate builds (or takes from the cache) the base template with the
// real ./cmd/sandboxd.
func BaseTemplate(t testing.TB) *template.Artifacts {
	t.Helper()
	return BaseTemplateWith(t, SandboxdBinary(t))
}

// BaseTemplateWith is BaseTemplate with another static binary as the agent
// (/sbin/init), for tests that need a stand-in.
func BaseTemplateWith(t testing.TB, sandboxdPath string) *template.Artifacts {
	t.Helper()
	baseOnce.Lock()
	defer baseOnce.Unlock()
	if a := baseOnce.byAgent[sandboxdPath]; a != nil {
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, err := template.BuildBase(ctx, template.BaseOptions{
		CacheDir:     filepath.Join(CacheDir(), "templates"),
		SandboxdPath: sandboxdPath,
		Logger:       slog.New(slog.NewTextHandler(tbWriter{t}, nil)),
	})
	if err != nil {
		t.Fatalf("base template: %v", err)
	}
	if baseOnce.byAgent == nil {
		baseOnce.byAgent = map[string]*template.Artifacts{}
	}
	baseOnce.byAgent[sandboxdPath] = a
	return a
}

// tbWriter sends log lines to the test's log (only used during the call).
type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var debianOnce struct {
	sync.Mutex
	byName map[string]*template.Artifacts
}

// DebianTemplate builds (or takes from the cache) the debian template with
// the real ./cmd/sandboxd: about a minute the first time on this host.
func DebianTemplate(t testing.TB) *template.Artifacts {
	t.Helper()
	return debianDerived(t, template.DebianOptions{}, 15*time.Minute)
}

// DesktopTemplate builds (or takes from the cache) the desktop template
// (debian plus Chromium and X) with the real ./cmd/sandboxd: several
// minutes the first time on this host.
func DesktopTemplate(t testing.TB) *template.Artifacts {
	t.Helper()
	return debianDerived(t, template.DesktopOptions(template.BaseOptions{}), 30*time.Minute)
}

func debianDerived(t testing.TB, opts template.DebianOptions, timeout time.Duration) *template.Artifacts {
	t.Helper()
	debianOnce.Lock()
	defer debianOnce.Unlock()
	if a := debianOnce.byName[opts.Name]; a != nil {
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts.Base = template.BaseOptions{
		CacheDir:     filepath.Join(CacheDir(), "templates"),
		SandboxdPath: SandboxdBinary(t),
		Logger:       slog.New(slog.NewTextHandler(tbWriter{t}, nil)),
	}
	a, err := template.BuildDebian(ctx, opts)
	if err != nil {
		t.Fatalf("template %s: %v", opts.Name, err)
	}
	if debianOnce.byName == nil {
		debianOnce.byName = map[string]*template.Artifacts{}
	}
	debianOnce.byName[opts.Name] = a
	return a
}
