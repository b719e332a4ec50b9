package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/zeish/zeish/internal/testskip"
)

// recordTB captures how RequireQEMU ends a test without ending this one.
type recordTB struct {
	testing.TB
	skipped, failed bool
}

func (r *recordTB) Helper()                   {}
func (r *recordTB) Skip(args ...any)          { r.skipped = true; runtime.Goexit() }
func (r *recordTB) Fatalf(string, ...any)     { r.failed = true; runtime.Goexit() }
func (r *recordTB) Fatal(args ...any)         { r.failed = true; runtime.Goexit() }
func (r *recordTB) Skipf(f string, a ...any)  { r.Skip(fmt.Sprintf(f, a...)) }
func (r *recordTB) Logf(string, ...any)       {}
func (r *recordTB) Errorf(f string, a ...any) { r.failed = true }

func TestRequireQEMU(t *testing.T) {
	tests := []struct {
		name, path, ci        string
		wantSkip, wantFailure bool
	}{
		{"missing, not CI: skip", t.TempDir(), "", true, false},
		{"missing, CI: fail", t.TempDir(), "true", false, true},
		{"present: run", os.Getenv("PATH"), "true", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.wantSkip && !tt.wantFailure {
				RequireQEMU(t) // the "present" case needs QEMU installed
			}
			t.Setenv("PATH", tt.path)
			t.Setenv("CI", tt.ci)
			rec := &recordTB{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); RequireQEMU(rec) }()
			<-done
			if rec.skipped != tt.wantSkip || rec.failed != tt.wantFailure {
				t.Errorf("skipped=%v failed=%v, want %v %v", rec.skipped, rec.failed, tt.wantSkip, tt.wantFailure)
			}
		})
	}
}

// Binaries must be byte-identical across builds, or every test run would
// miss the template cache and build a new base image.
func TestGoBuildStaticIsReproducible(t *testing.T) {
	testskip.Short(t, "runs go build")
	t.Setenv("ZEISH_TEST_CACHE", t.TempDir())
	const pkg = "./template/testdata/fakeinit"
	first, err := goBuildStatic(pkg)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	second, err := goBuildStatic(pkg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(second)
	if first != second || !bytes.Equal(a, b) || len(a) == 0 {
		t.Errorf("two builds differ (%s, %d bytes; %s, %d bytes)", first, len(a), second, len(b))
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(first), ".build-*")); len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}
}

// The real agent in the real template. Until ./cmd/sandboxd has source this
// cannot run; once it has, it must build.
func TestBaseTemplate(t *testing.T) {
	testskip.Short(t, "builds the base template")
	RequireQEMU(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if srcs, _ := filepath.Glob(filepath.Join(root, "cmd/sandboxd/*.go")); len(srcs) == 0 {
		testskip.Skip(t, "cmd/sandboxd has no source yet")
	}
	a := BaseTemplate(t)
	if b := BaseTemplate(t); b != a {
		t.Errorf("second call in one process built again")
	}
	for _, p := range []string{a.Kernel, a.Initrd, a.BaseDisk} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}
