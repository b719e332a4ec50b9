package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/node"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/node/lazyram"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/template"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/qemu"
)

// local is the node that runs this host's VMs: the single binary's own, or
// a node agent's (zeishd node).
type local struct {
	// images is the image store the cluster's nodes share (nil: none).
	images  *imagestore.Store
	lazy    *lazyram.RAM // nil: RAM is fetched whole
	node    *node.Node
	cat     *catalog.Catalog
	driver  vmm.Driver
	closers []func()
}

// Close stops the node's work (last opened, first closed); running VMs
// keep running for the next start to find again.
func (l *local) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
}

// openLocal opens the driver, the templates and the node on the data dir,
// recovers the node's sandboxes, and runs template builds from images.
// shared says the database is a cluster's: templates built here are
// recorded as held by nodeID (their files live on this host only), and
// only those are resumed and swept here. remote is the image store the
// caller opened (openImageStore; nil: none).
func openLocal(ctx context.Context, log *slog.Logger, cfg *config.Config, st store.Store, nodeID string, shared bool, remote *images.Remote) (*local, error) {
	kernel, err := guestKernel(cfg)
	if err != nil {
		return nil, err
	}
	driver, err := openDriver(log, cfg, kernel)
	if err != nil {
		return nil, err
	}
	sandboxd, err := sandboxdPath(cfg)
	if err != nil {
		return nil, err
	}
	cat := catalog.New(st, template.BaseOptions{CacheDir: templateCache(cfg), SandboxdPath: sandboxd, Logger: log, KernelPath: kernel})
	netw, err := openNetwork(ctx, log, cfg)
	if err != nil {
		return nil, err
	}
	l := &local{}
	if remote != nil {
		l.images = remote.Store
		if l.lazy = openLazyRAM(log, cfg, remote, nodeID); l.lazy != nil {
			remote.Lazy = l.lazy
			l.closers = append(l.closers, l.lazy.Close) // after the node's
		}
	}
	if netw != nil {
		l.closers = append(l.closers, func() { netw.Close() }) // after the node: guests' rules stay while their VMs run
	}
	n := node.New(node.Options{ID: nodeID, Region: cfg.Region, DataDir: cfg.DataDir, Store: st, Driver: driver, Templates: cat,
		Logger: log, BootTimeout: cfg.BootTimeout, MemoryBudgetMiB: cfg.MemoryBudgetMiB, Network: netw,
		AccountImageRAMMiB: cfg.PlanImageRAMMiB, ColdAfter: cfg.ColdAfter, StoppedPromotion: cfg.ForkPromotion == "stopped",
		Desktop: cfg.Desktop, ReadyVMs: cfg.ReadyVMs, DiskLayers: cfg.DiskLayers,
		ImageStore: remote, TemplateCacheMiB: cfg.TemplateCacheMiB})
	l.closers = append(l.closers, n.Close)
	l.node, l.cat, l.driver = n, cat, driver
	if err := n.Recover(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("recover: %w", err)
	}
	prepareBuiltins(ctx, cfg, cat)
	host := ""
	if shared {
		host = nodeID
	}
	builds, err := buildOptions(cfg)
	if err != nil {
		l.Close()
		return nil, err
	}
	builds.Dir, builds.Warmer, builds.Host, builds.Ready = filepath.Join(cfg.DataDir, "template-builds"), n, host, n.PublishTemplate
	builds.Removed = n.UnpublishTemplate
	if err := cat.StartBuilds(ctx, builds); err != nil {
		l.Close()
		return nil, fmt.Errorf("template builds: %w", err)
	}
	l.closers = append(l.closers, cat.Close) // interrupted builds resume on the next start
	return l, nil
}

func templateCache(cfg *config.Config) string {
	if cfg.TemplateCache != "" {
		return cfg.TemplateCache
	}
	return filepath.Join(cfg.DataDir, "templates")
}

// openDriver is the QEMU driver as configured.
func openDriver(log *slog.Logger, cfg *config.Config, kernel string) (vmm.Driver, error) {
	deltaMiB := cfg.DeltaMaxMiB
	if deltaMiB == 0 {
		deltaMiB = -1 // the driver's "never": captures always migrate
	}
	return qemu.New(qemu.Options{Accel: vmm.Accel(cfg.Accel), TCGTBSizeMiB: cfg.TCGTBMiB, CloneTCGTBSizeMiB: cfg.TCGCloneTBMiB,
		ProbeKernel: kernel, AccelCache: filepath.Join(cfg.DataDir, accelCacheName),
		// As root, VMMs run confined (unprivileged user, chroot, cgroup), like
		// Firecracker's jailer (ZEISH_CONFINE).
		Confine: cfg.Confine && os.Geteuid() == 0, VMUser: cfg.VMUser, NoSeccomp: !cfg.Seccomp,
		CgroupsOptional: cfg.Cgroups == "optional", Logger: log,
		NoInflate: !cfg.ForkInflate, LiveDowntimeMS: cfg.LiveDowntimeMS,
		// Disk files through io_uring where it works (vmm/qemu/aio.go), or QEMU's threads.
		ThreadsAIO:     cfg.DiskAIO == "threads",
		LiveSerialPrep: cfg.LivePrep == "serial", DeltaMaxMiB: deltaMiB,
		NoKernelStub: !cfg.KernelStub})
}

// prepareBuiltins builds (or finds) the built-in templates in the
// background: base now so the first create is quick; debian (about a
// minute the first time) and desktop (debian plus Chromium and X, minutes)
// only when asked, so test servers do not pay for them. Without desktop,
// browser and desktop are refused with a message saying how to get it.
func prepareBuiltins(ctx context.Context, cfg *config.Config, cat *catalog.Catalog) {
	bg := context.WithoutCancel(ctx)
	go cat.Prepare(bg)
	if cfg.DebianTemplate {
		var extra []string
		if cfg.DebianBuildEssential {
			extra = append(extra, "build-essential") // gcc, make, libc headers: ~200 MiB more
		}
		cat.EnableDebian(template.DebianOptions{Extra: extra})
		go cat.PrepareDebian(bg)
	}
	if cfg.DesktopTemplate {
		cat.EnableDesktop(template.DesktopOptions(template.BaseOptions{}))
		go cat.PrepareBuiltin(bg, catalog.DesktopName)
	}
}

// buildOptions is what bounds template builds: how many run at once, the
// registry ranges a pull may reach (the guests' blocked ranges, less
// ZEISH_REGISTRY_ALLOW_RANGES), the build deadline and the per-account
// template quotas.
func buildOptions(cfg *config.Config) (catalog.BuildOptions, error) {
	guard, err := dialguard.New(network.DefaultBlocked, cfg.RegistryAllowRanges)
	if err != nil {
		return catalog.BuildOptions{}, fmt.Errorf("ZEISH_REGISTRY_ALLOW_RANGES: %w", err)
	}
	return catalog.BuildOptions{Parallel: cfg.TemplateBuilds, RegistryGuard: guard, Timeout: cfg.TemplateBuildTimeout,
		Quota: catalog.Quota{Templates: cfg.PlanTemplates, Bytes: cfg.PlanTemplateMiB << 20, Uploads: cfg.PlanTemplateUploads}}, nil
}
