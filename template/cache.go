package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cache layout under CacheDir:
//
//	.lock                     flock'd while a process builds
//	base-<hash[:24]>/         one complete build, never modified or removed
//	  manifest.json           written last, before the folder is renamed into place
//	.tmp-base-<hash>-<rand>/  a build in progress (or left by a crash)
//
// A build only becomes visible by the atomic rename of its temp folder, so a
// folder named base-* is complete by construction; the manifest check is a
// second line of defence against a torn or hand-edited cache.

const (
	manifestName = "manifest.json"
	tmpPrefix    = ".tmp-base-"
)

// manifest records a build; paths are relative so a moved cache still works.
type manifest struct {
	Builder       string `json:"builder"`
	Hash          string `json:"hash"`
	Kernel        string `json:"kernel"`
	Initrd        string `json:"initrd"`
	BaseDisk      string `json:"base_disk"`
	KernelArgs    string `json:"kernel_args"`
	KernelRelease string `json:"kernel_release"`
	DiskMiB       int    `json:"disk_mib"`
	// Image is what an OCI template's image config says (nil for base).
	Image *ImageConfig `json:"image,omitempty"`
}

func (m *manifest) artifacts(dir string) *Artifacts {
	return &Artifacts{
		Dir:           dir,
		Kernel:        filepath.Join(dir, m.Kernel),
		Initrd:        filepath.Join(dir, m.Initrd),
		BaseDisk:      filepath.Join(dir, m.BaseDisk),
		KernelArgs:    m.KernelArgs,
		KernelRelease: m.KernelRelease,
		DiskMiB:       m.DiskMiB,
		Hash:          m.Hash,
		Image:         m.Image,
	}
}

// buildFunc writes a build's files into dir and describes them.
type buildFunc func(ctx context.Context, dir string) (*manifest, error)

func buildDir(cacheDir, hash string) string {
	return kindDir(cacheDir, "base", hash)
}

// kindDir is where a build of one kind ("base", "oci") lives.
func kindDir(cacheDir, kind, hash string) string {
	return filepath.Join(cacheDir, kind+"-"+hash[:24])
}

// loadBuild returns the complete build in dir, or nil if there is none.
func loadBuild(dir, hash string) *Artifacts {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil
	}
	var m manifest
	if json.Unmarshal(b, &m) != nil || m.Hash != hash {
		return nil
	}
	a := m.artifacts(dir)
	for _, p := range []string{a.Kernel, a.Initrd, a.BaseDisk} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			return nil
		}
	}
	return a
}

// ensure returns the build for hash, running build under the cache lock if
// it is not there yet. built reports whether this call built it.
func ensure(ctx context.Context, log *slog.Logger, cacheDir, hash string, build buildFunc) (a *Artifacts, built bool, err error) {
	return ensureKind(ctx, log, cacheDir, "base", hash, build)
}

// ensureKind is ensure for builds of any kind. Base builds share one cache
// lock; other kinds lock per hash, so that different images build in
// parallel (the caller bounds how many) while one image builds once.
func ensureKind(ctx context.Context, log *slog.Logger, cacheDir, kind, hash string, build buildFunc) (a *Artifacts, built bool, err error) {
	final := kindDir(cacheDir, kind, hash)
	if a := loadBuild(final, hash); a != nil {
		return a, false, nil // fast path: no lock, the rename made it complete
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, false, err
	}
	lockName, stale := ".lock", tmpPrefix
	if kind != "base" {
		lockName, stale = ".lock-"+kind+"-"+hash[:24], tmpPrefix+kind+"-"+hash[:24]+"-"
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, lockName))
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if a := loadBuild(final, hash); a != nil {
		return a, false, nil // another process built it while we waited
	}
	removeStaleTemps(log, cacheDir, stale)
	if _, err := os.Lstat(final); err == nil {
		// Not complete but present: keep it for inspection, out of the way.
		aside := fmt.Sprintf("%s.broken-%d", final, time.Now().Unix())
		log.Warn("template: incomplete build found, moving it aside", keyDir, final, "to", aside)
		if err := os.Rename(final, aside); err != nil {
			return nil, false, err
		}
	}
	tmpName := tmpPrefix + hash[:24] + "-"
	if kind != "base" {
		tmpName = tmpPrefix + kind + "-" + hash[:24] + "-"
	}
	tmp, err := os.MkdirTemp(cacheDir, tmpName)
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, false, err
	}
	m, err := build(ctx, tmp)
	if err != nil {
		return nil, false, err
	}
	m.Hash, m.Builder = hash, builderVersion
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, manifestName), b, 0o644); err != nil {
		return nil, false, err
	}
	// Durable contents before the rename publishes them.
	if err := syncFile(filepath.Join(tmp, manifestName)); err != nil {
		return nil, false, err
	}
	if err := syncFile(tmp); err != nil {
		return nil, false, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, false, err
	}
	if err := syncFile(cacheDir); err != nil {
		return nil, false, err
	}
	return m.artifacts(final), true, nil
}

// lockDir takes an exclusive flock on dir/.lock, polling so that ctx can
// cancel the wait (a blocking flock cannot be interrupted).
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	return lockFile(ctx, filepath.Join(dir, ".lock"))
}

// lockFile takes an exclusive flock on file (created if missing).
func lockFile(ctx context.Context, file string) (unlock func(), err error) {
	dir := filepath.Dir(file)
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the template cache lock: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeStaleTemps deletes temp folders of crashed builds whose names start
// with prefix. It runs under the lock that every build of those names holds,
// so none of them is in use. Base's prefix covers only base builds: other
// kinds' temps start with tmpPrefix+kind, which base's lock does not cover.
func removeStaleTemps(log *slog.Logger, cacheDir, prefix string) {
	entries, _ := os.ReadDir(cacheDir)
	for _, e := range entries {
		if prefix == tmpPrefix && isKindTemp(e.Name()) {
			continue
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			log.Info("template: removing an interrupted build", keyDir, e.Name())
			os.RemoveAll(filepath.Join(cacheDir, e.Name()))
		}
	}
}

// isKindTemp reports whether a temp folder belongs to a non-base build:
// a base build's temp is tmpPrefix, 24 hex digits of its hash and "-"; any
// other kind's starts with the kind's name (oci, debian, debian-desktop),
// which is not hex all the way.
func isKindTemp(name string) bool {
	rest, ok := strings.CutPrefix(name, tmpPrefix)
	if !ok || len(rest) < 25 || rest[24] != '-' {
		return ok
	}
	for _, c := range rest[:24] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return true
		}
	}
	return false
}
