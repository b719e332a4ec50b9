package template

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Log attribute keys.
const (
	keyHash = "hash"
	keyDir  = "dir"
	keyTook = "took"
	keyStep = "step"
)

// Artifacts are the files a sandbox boots from.
type Artifacts struct {
	Dir           string       // the cache folder holding the files below
	Kernel        string       // path to vmlinuz
	Initrd        string       // path to initramfs (gzip cpio newc)
	BaseDisk      string       // ext4 root filesystem as qcow2, read-only backing for every sandbox's overlay
	KernelArgs    string       // the kernel command line to boot with
	KernelRelease string       // e.g. "6.1.0-56-cloud-amd64", what `uname -r` says in the guest
	DiskMiB       int          // size of the root filesystem in BaseDisk
	Hash          string       // content hash of all inputs
	Image         *ImageConfig // what an OCI template's image config says (nil for base)
}

// BaseOptions say where the base template's inputs come from and where the
// build is cached.
type BaseOptions struct {
	CacheDir     string       // e.g. <data dir>/templates
	SandboxdPath string       // static guest-agent binary, installed as /usr/sbin/sandboxd
	KernelPath   string       // default: newest /boot/vmlinuz-*-cloud-amd64 (modules from /lib/modules/<release>)
	BusyboxPath  string       // default /bin/busybox
	Logger       *slog.Logger // progress lines; nil discards them
}

// BuildBase returns the cached artifacts for these inputs, building them if
// missing. Any change to an input (kernel, modules, busybox, sandboxd,
// resize2fs and its libraries, the init script, this builder) gives a new hash
// and a new build next to the old ones, which are never removed. Safe to call
// from several processes at once.
func BuildBase(ctx context.Context, opts BaseOptions) (*Artifacts, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.CacheDir == "" {
		return nil, fmt.Errorf("template: BaseOptions.CacheDir is empty")
	}
	start := time.Now()
	in, err := gatherInputs(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("template base: %w", err)
	}
	hash := in.hash()
	a, built, err := ensure(ctx, log, opts.CacheDir, hash, func(ctx context.Context, dir string) (*manifest, error) {
		log.Info("template: building base", keyHash, hash[:12], "kernel", in.Release)
		return buildBase(ctx, log, dir, in, hash)
	})
	if err != nil {
		return nil, fmt.Errorf("template base: %w", err)
	}
	if built {
		log.Info("template: base built", keyDir, a.Dir, keyTook, time.Since(start).Round(time.Millisecond))
	} else {
		log.Debug("template: base cached", keyDir, a.Dir, keyTook, time.Since(start).Round(time.Millisecond))
	}
	return a, nil
}

// buildBase writes vmlinuz, initrd.img and base.qcow2 into dir.
func buildBase(ctx context.Context, log *slog.Logger, dir string, in *inputs, hash string) (*manifest, error) {
	if os.Geteuid() != 0 {
		// mkfs.ext4 -d copies owners from the staging tree.
		log.Warn("template: not root, files in the image will be owned by the builder's uid")
	}
	m := &manifest{Kernel: "vmlinuz", Initrd: "initrd.img", BaseDisk: "base.qcow2",
		KernelArgs: KernelArgs, KernelRelease: in.Release, DiskMiB: DiskMiB}
	// Own copy of the kernel: /boot changes on upgrades, builds must not.
	if err := os.WriteFile(filepath.Join(dir, m.Kernel), in.Kernel, 0o644); err != nil {
		return nil, err
	}
	if err := syncFile(filepath.Join(dir, m.Kernel)); err != nil {
		return nil, err
	}
	step := time.Now()
	if err := writeInitramfs(filepath.Join(dir, m.Initrd), in); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	log.Info("template: step done", keyStep, "initramfs", "modules", len(in.Modules), keyTook, time.Since(step).Round(time.Millisecond))
	step = time.Now()
	stage := filepath.Join(dir, "rootfs")
	if err := stageRootfs(ctx, stage, in); err != nil {
		return nil, fmt.Errorf("stage root filesystem: %w", err)
	}
	if err := makeDisk(ctx, stage, filepath.Join(dir, m.BaseDisk), hash); err != nil {
		return nil, fmt.Errorf("root disk: %w", err)
	}
	if err := os.RemoveAll(stage); err != nil {
		return nil, err
	}
	log.Info("template: step done", keyStep, "rootfs", keyTook, time.Since(step).Round(time.Millisecond))
	return m, nil
}
