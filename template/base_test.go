package template_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
)

// A static x86-64 binary to stand in for sandboxd where only its bytes matter.
const staticBinary = "/bin/busybox"

func TestBuildBaseMissingInputs(t *testing.T) {
	tests := []struct {
		name     string
		opts     template.BaseOptions
		wantText string
		missing  bool // errors.Is(err, ErrMissingInput)
	}{
		{"no kernel", template.BaseOptions{KernelPath: "/nonexistent/vmlinuz-1", SandboxdPath: staticBinary}, "linux-image-cloud-amd64", true},
		{"no busybox", template.BaseOptions{BusyboxPath: "/nonexistent/busybox", SandboxdPath: staticBinary}, "busybox-static", true},
		{"dynamic busybox", template.BaseOptions{BusyboxPath: "/bin/ls", SandboxdPath: staticBinary}, "busybox-static", false},
		{"no sandboxd given", template.BaseOptions{}, "CGO_ENABLED=0", true},
		{"no sandboxd file", template.BaseOptions{SandboxdPath: "/nonexistent/sandboxd"}, "/nonexistent/sandboxd", true},
		{"dynamic sandboxd", template.BaseOptions{SandboxdPath: "/bin/ls"}, "CGO_ENABLED=0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.CacheDir = t.TempDir()
			_, err := template.BuildBase(context.Background(), tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not mention %q", err, tt.wantText)
			}
			if got := errors.Is(err, template.ErrMissingInput); got != tt.missing {
				t.Errorf("errors.Is(ErrMissingInput) = %v, want %v (%v)", got, tt.missing, err)
			}
			if entries, _ := os.ReadDir(tt.opts.CacheDir); len(entries) != 0 {
				t.Errorf("failed call left files in the cache: %v", entries)
			}
		})
	}
}

// Real builds (no VM): a second call is a cache hit that leaves the build
// untouched; new sandboxd bytes give a new build and keep the old one.
func TestBuildBaseRebuildsOnChange(t *testing.T) {
	testskip.Short(t, "runs mkfs.ext4 and qemu-img")
	testenv.RequireQEMU(t) // qemu-img
	cache := t.TempDir()
	agent := filepath.Join(t.TempDir(), "sandboxd")
	b, err := os.ReadFile(staticBinary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent, b, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := template.BaseOptions{CacheDir: cache, SandboxdPath: agent}

	start := time.Now()
	first, err := template.BuildBase(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cold build: %v", time.Since(start).Round(time.Millisecond))
	before, _ := os.Stat(first.BaseDisk)

	start = time.Now()
	hit, err := template.BuildBase(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache hit: %v", time.Since(start).Round(time.Millisecond))
	after, _ := os.Stat(hit.BaseDisk)
	if *hit != *first || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("cache hit rebuilt or changed the build: %+v vs %+v", hit, first)
	}

	if err := os.WriteFile(agent, append(b, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := template.BuildBase(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Hash == first.Hash || changed.Dir == first.Dir {
		t.Fatalf("new sandboxd bytes kept hash %s", first.Hash)
	}
	if _, err := os.Stat(first.BaseDisk); err != nil {
		t.Errorf("old build was removed: %v", err)
	}
	if first.DiskMiB != 1024 || first.KernelArgs == "" || first.KernelRelease == "" {
		t.Errorf("incomplete artifacts: %+v", first)
	}
}
