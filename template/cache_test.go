package template

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeBuild writes placeholder artifacts and counts its calls.
type fakeBuild struct {
	calls atomic.Int32
	err   error
}

func (f *fakeBuild) build(ctx context.Context, dir string) (*manifest, error) {
	f.calls.Add(1)
	if f.err != nil {
		os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("half"), 0o644)
		return nil, f.err
	}
	for _, n := range []string{"vmlinuz", "initrd.img", "base.qcow2"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			return nil, err
		}
	}
	return &manifest{Kernel: "vmlinuz", Initrd: "initrd.img", BaseDisk: "base.qcow2", DiskMiB: DiskMiB}, nil
}

const (
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestEnsure(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name string
		// prepare leaves state in the cache before the call under test.
		prepare    func(t *testing.T, cache string, fb *fakeBuild)
		hash       string
		wantBuilds int32
	}{
		{
			name:       "empty cache builds",
			hash:       hashA,
			wantBuilds: 1,
		},
		{
			name: "same inputs hit the cache",
			prepare: func(t *testing.T, cache string, fb *fakeBuild) {
				mustEnsure(t, cache, hashA, fb)
			},
			hash:       hashA,
			wantBuilds: 1, // the prepare's build only
		},
		{
			name: "changed inputs build again next to the old build",
			prepare: func(t *testing.T, cache string, fb *fakeBuild) {
				mustEnsure(t, cache, hashA, fb)
			},
			hash:       hashB,
			wantBuilds: 2,
		},
		{
			name: "interrupted build in a temp folder is not taken",
			prepare: func(t *testing.T, cache string, fb *fakeBuild) {
				// Everything but the rename: what a crash just before it leaves.
				tmp := filepath.Join(cache, tmpPrefix+hashA[:24]+"-crash")
				os.MkdirAll(tmp, 0o755)
				if _, err := fb.build(context.Background(), tmp); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(tmp, manifestName), []byte(`{"hash":"`+hashA+`","kernel":"vmlinuz","initrd":"initrd.img","base_disk":"base.qcow2"}`), 0o644)
				fb.calls.Store(0)
			},
			hash:       hashA,
			wantBuilds: 1,
		},
		{
			name: "build folder without manifest is not taken",
			prepare: func(t *testing.T, cache string, fb *fakeBuild) {
				dir := buildDir(cache, hashA)
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("x"), 0o644)
			},
			hash:       hashA,
			wantBuilds: 1,
		},
		{
			name: "manifest of other inputs is not taken",
			prepare: func(t *testing.T, cache string, fb *fakeBuild) {
				mustEnsure(t, cache, hashA, fb)
				m := filepath.Join(buildDir(cache, hashA), manifestName)
				b, _ := os.ReadFile(m)
				os.WriteFile(m, []byte(strings.ReplaceAll(string(b), hashA, hashB)), 0o644)
			},
			hash:       hashA,
			wantBuilds: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := t.TempDir()
			fb := &fakeBuild{}
			if tt.prepare != nil {
				tt.prepare(t, cache, fb)
			}
			a, _, err := ensure(context.Background(), log, cache, tt.hash, fb.build)
			if err != nil {
				t.Fatal(err)
			}
			if got := fb.calls.Load(); got != tt.wantBuilds {
				t.Errorf("builds = %d, want %d", got, tt.wantBuilds)
			}
			if a.Hash != tt.hash || a.Dir != buildDir(cache, tt.hash) {
				t.Errorf("got build %s (hash %s), want hash %s", a.Dir, a.Hash, tt.hash)
			}
			if loadBuild(a.Dir, tt.hash) == nil {
				t.Errorf("returned build is not complete")
			}
			assertNoTemps(t, cache)
			if tt.hash == hashB && loadBuild(buildDir(cache, hashA), hashA) == nil {
				t.Errorf("old build was removed")
			}
		})
	}
}

func TestEnsureFailedBuildLeavesNothing(t *testing.T) {
	cache := t.TempDir()
	fb := &fakeBuild{err: errors.New("mkfs exploded")}
	_, _, err := ensure(context.Background(), slog.New(slog.DiscardHandler), cache, hashA, fb.build)
	if err == nil || !strings.Contains(err.Error(), "mkfs exploded") {
		t.Fatalf("err = %v, want the build's error", err)
	}
	if _, err := os.Stat(buildDir(cache, hashA)); !os.IsNotExist(err) {
		t.Errorf("failed build left %s", buildDir(cache, hashA))
	}
	assertNoTemps(t, cache)
}

// Concurrent callers (separate flock descriptions, as separate processes
// would have) build once and all get the same build.
func TestEnsureConcurrentBuildsOnce(t *testing.T) {
	cache := t.TempDir()
	fb := &fakeBuild{}
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, _, err := ensure(context.Background(), slog.New(slog.DiscardHandler), cache, hashA, fb.build)
			if err != nil {
				t.Error(err)
				return
			}
			dirs[i] = a.Dir
		}()
	}
	wg.Wait()
	if got := fb.calls.Load(); got != 1 {
		t.Errorf("builds = %d, want 1", got)
	}
	for _, d := range dirs {
		if d != dirs[0] {
			t.Errorf("callers got different builds: %v", dirs)
		}
	}
}

func mustEnsure(t *testing.T, cache, hash string, fb *fakeBuild) {
	t.Helper()
	if _, _, err := ensure(context.Background(), slog.New(slog.DiscardHandler), cache, hash, fb.build); err != nil {
		t.Fatal(err)
	}
}

func assertNoTemps(t *testing.T, cache string) {
	t.Helper()
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("temp folder left behind: %s", e.Name())
		}
	}
}

// A base build sweeps its own crashed temps only: every other kind's temp
// (built under another lock, maybe right now) is spared.
func TestIsKindTemp(t *testing.T) {
	cases := []struct {
		name string
		kind bool
	}{
		{tmpPrefix + "0123456789abcdef01234567-42", false},
		{tmpPrefix + "0123456789abcdef01234567-", false},
		{tmpPrefix + "oci-0123456789abcdef01234567-42", true},
		{tmpPrefix + "debian-0123456789abcdef01234567-42", true},
		{tmpPrefix + "debian-desktop-0123456789abcdef01234567-42", true},
		{tmpPrefix + "desktop-0123456789abcdef01234567-42", true},
		{tmpPrefix + "deadbeefdeadbeefdeadbeefx-1", true},
	}
	for _, c := range cases {
		if got := isKindTemp(c.name); got != c.kind {
			t.Errorf("isKindTemp(%q) = %v, want %v", c.name, got, c.kind)
		}
	}
}
