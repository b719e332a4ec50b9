package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/node"
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
	node    *node.Node
	cat     *catalog.Catalog
	driver  vmm.Driver
	budget  int
	closers []func()
}

// Close stops the node's work (last opened, first closed); running VMs
// keep running for the next start to find again.
func (l *local) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
}

// openLocal opens the driver, the templates and the node on dataDir, and
// recovers the node's sandboxes, and runs template builds from images.
// shared says the database is a cluster's: templates built here are
// recorded as held by nodeID (their files live on this host only), and
// only those are resumed and swept here.
func openLocal(ctx context.Context, log *slog.Logger, dataDir string, st store.Store, nodeID string, shared bool) (*local, error) {
	// As root, VMMs run confined (unprivileged user, chroot, cgroup), like
	// Firecracker's jailer; ZEISH_CONFINE=off runs them as zeishd's user.
	confine := os.Geteuid() == 0 && env("ZEISH_CONFINE", "on") != "off"
	kernel, err := guestKernel()
	if err != nil {
		return nil, err
	}
	tbMiB, err := strconv.Atoi(env("ZEISH_TCG_TB_MIB", "128"))
	if err != nil || tbMiB < 0 {
		return nil, fmt.Errorf("ZEISH_TCG_TB_MIB: want a size in MiB (0: QEMU's default), got %q", os.Getenv("ZEISH_TCG_TB_MIB"))
	}
	cloneTBMiB, err := strconv.Atoi(env("ZEISH_TCG_CLONE_TB_MIB", "0"))
	if err != nil || cloneTBMiB < 0 {
		return nil, fmt.Errorf("ZEISH_TCG_CLONE_TB_MIB: want a size in MiB (0: as ZEISH_TCG_TB_MIB), got %q", os.Getenv("ZEISH_TCG_CLONE_TB_MIB"))
	}
	downtimeMS, err := strconv.Atoi(env("ZEISH_LIVE_DOWNTIME_MS", "5"))
	if err != nil || downtimeMS < 1 {
		return nil, fmt.Errorf("ZEISH_LIVE_DOWNTIME_MS: want milliseconds ≥ 1, got %q", os.Getenv("ZEISH_LIVE_DOWNTIME_MS"))
	}
	// Disk files through io_uring where it works (vmm/qemu/aio.go), or QEMU's threads.
	diskAIO := env("ZEISH_DISK_AIO", "auto")
	if diskAIO != "auto" && diskAIO != "threads" {
		return nil, fmt.Errorf("ZEISH_DISK_AIO: want auto (io_uring where it works) or threads, got %q", diskAIO)
	}
	deltaMiB, err := strconv.Atoi(env("ZEISH_DELTA_MAX_MIB", "32"))
	if err != nil || deltaMiB < 0 {
		return nil, fmt.Errorf("ZEISH_DELTA_MAX_MIB: want a number of MiB (0: captures always migrate), got %q", os.Getenv("ZEISH_DELTA_MAX_MIB"))
	}
	if deltaMiB == 0 {
		deltaMiB = -1
	}
	driver, err := qemu.New(qemu.Options{Accel: vmm.Accel(env("ZEISH_ACCEL", "")), TCGTBSizeMiB: tbMiB, CloneTCGTBSizeMiB: cloneTBMiB,
		ProbeKernel: kernel, AccelCache: filepath.Join(dataDir, accelCacheName),
		Confine: confine, VMUser: os.Getenv("ZEISH_VM_USER"), NoSeccomp: env("ZEISH_SECCOMP", "on") == "off",
		CgroupsOptional: env("ZEISH_CGROUPS", "required") == "optional", Logger: log,
		NoInflate: env("ZEISH_FORK_INFLATE", "on") == "off", LiveDowntimeMS: downtimeMS,
		ThreadsAIO:     diskAIO == "threads",
		LiveSerialPrep: env("ZEISH_LIVE_PREP", "parallel") == "serial", DeltaMaxMiB: deltaMiB,
		NoKernelStub: env("ZEISH_KERNEL_STUB", "on") == "off"})
	if err != nil {
		return nil, err
	}
	sandboxd, err := sandboxdPath()
	if err != nil {
		return nil, err
	}
	cat := catalog.New(st, template.BaseOptions{
		CacheDir: env("ZEISH_TEMPLATE_CACHE", filepath.Join(dataDir, "templates")), SandboxdPath: sandboxd, Logger: log,
		KernelPath: kernel,
	})
	bootTimeout, err := time.ParseDuration(env("ZEISH_BOOT_TIMEOUT", "3m"))
	if err != nil {
		return nil, fmt.Errorf("ZEISH_BOOT_TIMEOUT: %w", err)
	}
	budget, err := memoryBudget()
	if err != nil {
		return nil, err
	}
	imageRAM, err := strconv.Atoi(env("ZEISH_PLAN_IMAGE_RAM_MIB", "16384"))
	if err != nil || imageRAM < 0 {
		return nil, fmt.Errorf("ZEISH_PLAN_IMAGE_RAM_MIB: want a number of MiB, 0 for no cap")
	}
	// Images nothing has used for this long move from /dev/shm to disk.
	coldAfter, err := time.ParseDuration(env("ZEISH_COLD_AFTER", "10m"))
	if err != nil || coldAfter < 0 {
		return nil, fmt.Errorf("ZEISH_COLD_AFTER: want a duration (10m), 0 to keep images in /dev/shm, got %q", os.Getenv("ZEISH_COLD_AFTER"))
	}
	// VMs kept launched and loaded per warm template in use (node/ready.go).
	readyVMs, err := strconv.Atoi(env("ZEISH_READY_VMS", "1"))
	if err != nil || readyVMs < 0 {
		return nil, fmt.Errorf("ZEISH_READY_VMS: want a number of VMs per warm template, 0 for none, got %q", os.Getenv("ZEISH_READY_VMS"))
	}
	// Frozen layers a running sandbox's disk may stand on before they are
	// merged into one (node/merge.go).
	diskLayers, err := strconv.Atoi(env("ZEISH_DISK_LAYERS", "2"))
	if err != nil || diskLayers < 0 {
		return nil, fmt.Errorf("ZEISH_DISK_LAYERS: want a number of layers, 0 to never merge, got %q", os.Getenv("ZEISH_DISK_LAYERS"))
	}
	parallel, err := strconv.Atoi(env("ZEISH_TEMPLATE_BUILDS", "2"))
	if err != nil || parallel < 1 {
		return nil, fmt.Errorf("ZEISH_TEMPLATE_BUILDS: want a positive number, got %q", os.Getenv("ZEISH_TEMPLATE_BUILDS"))
	}
	limits, err := templateLimits()
	if err != nil {
		return nil, err
	}
	netw, err := openNetwork(ctx, log)
	if err != nil {
		return nil, err
	}
	// The screen of sandboxes with desktop: true.
	desk, err := desktop.ParseSize(env("ZEISH_DESKTOP_SIZE", "1280x800x24"))
	if err != nil {
		return nil, fmt.Errorf("ZEISH_DESKTOP_SIZE: %w", err)
	}
	// Templates built on other nodes, fetched from the image store, kept
	// up to this much disk (least recently used first out).
	tplCacheMiB, err := strconv.Atoi(env("ZEISH_TEMPLATE_CACHE_MIB", "8192"))
	if err != nil || tplCacheMiB < 0 {
		return nil, fmt.Errorf("ZEISH_TEMPLATE_CACHE_MIB: want a number of MiB, 0 for no bound, got %q", os.Getenv("ZEISH_TEMPLATE_CACHE_MIB"))
	}
	l := &local{budget: budget}
	remote, err := openImageStore(ctx, log, "/dev/shm")
	if err != nil {
		return nil, err
	}
	if remote != nil {
		l.images = remote.Store
	}
	if netw != nil {
		l.closers = append(l.closers, func() { netw.Close() }) // after the node: guests' rules stay while their VMs run
	}
	n := node.New(node.Options{ID: nodeID, Region: os.Getenv("ZEISH_REGION"), DataDir: dataDir, Store: st, Driver: driver, Templates: cat,
		Logger: log, BootTimeout: bootTimeout, MemoryBudgetMiB: budget, Network: netw, AccountImageRAMMiB: imageRAM, ColdAfter: coldAfter,
		StoppedPromotion: env("ZEISH_FORK_PROMOTION", "live") == "stopped", Desktop: desk, ReadyVMs: readyVMs, DiskLayers: diskLayers,
		ImageStore: remote, TemplateCacheMiB: tplCacheMiB})
	l.closers = append(l.closers, n.Close)
	l.node, l.cat, l.driver = n, cat, driver
	if err := n.Recover(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("recover: %w", err)
	}
	// Build (or find) the base template now so the first create is quick.
	go cat.Prepare(context.WithoutCancel(ctx))
	// The debian template takes about a minute (more on a slow mirror) to
	// build the first time: opt-in, so test servers do not pay for it.
	if env("ZEISH_DEBIAN_TEMPLATE", "off") == "on" {
		var extra []string
		if env("ZEISH_DEBIAN_BUILD_ESSENTIAL", "off") == "on" {
			extra = append(extra, "build-essential") // gcc, make, libc headers: ~200 MiB more
		}
		cat.EnableDebian(template.DebianOptions{Extra: extra})
		go cat.PrepareDebian(context.WithoutCancel(ctx))
	}
	// The desktop template (debian plus Chromium and X, about 1.2 GB
	// unpacked) takes minutes to build: opt-in like debian. Without it,
	// browser and desktop are refused with a message saying how to get it.
	if env("ZEISH_DESKTOP_TEMPLATE", "off") == "on" {
		cat.EnableDesktop(template.DesktopOptions(template.BaseOptions{}))
		go cat.PrepareBuiltin(context.WithoutCancel(ctx), catalog.DesktopName)
	}
	host := ""
	if shared {
		host = nodeID
	}
	limits.Dir, limits.Parallel, limits.Warmer, limits.Host, limits.Ready = filepath.Join(dataDir, "template-builds"), parallel, n, host, n.PublishTemplate
	limits.Removed = n.UnpublishTemplate
	if err := cat.StartBuilds(ctx, limits); err != nil {
		l.Close()
		return nil, fmt.Errorf("template builds: %w", err)
	}
	l.closers = append(l.closers, cat.Close) // interrupted builds resume on the next start
	return l, nil
}

// templateLimits reads what bounds template builds: the registry ranges a
// pull may reach (the guests' blocked ranges, less ZEISH_REGISTRY_ALLOW_RANGES),
// the build deadline and the per-account template quotas.
func templateLimits() (catalog.BuildOptions, error) {
	var o catalog.BuildOptions
	guard, err := dialguard.New(network.DefaultBlocked, list(os.Getenv("ZEISH_REGISTRY_ALLOW_RANGES")))
	if err != nil {
		return o, fmt.Errorf("ZEISH_REGISTRY_ALLOW_RANGES: %w", err)
	}
	o.RegistryGuard = guard
	if o.Timeout, err = time.ParseDuration(env("ZEISH_TEMPLATE_BUILD_TIMEOUT", catalog.DefaultBuildTimeout.String())); err != nil || o.Timeout <= 0 {
		return o, fmt.Errorf("ZEISH_TEMPLATE_BUILD_TIMEOUT: want a duration (30m), got %q", os.Getenv("ZEISH_TEMPLATE_BUILD_TIMEOUT"))
	}
	if o.Quota.Templates, err = strconv.Atoi(env("ZEISH_PLAN_TEMPLATES", "20")); err != nil || o.Quota.Templates < 0 {
		return o, fmt.Errorf("ZEISH_PLAN_TEMPLATES: want a number of templates per account, 0 for no cap, got %q", os.Getenv("ZEISH_PLAN_TEMPLATES"))
	}
	mib, err := strconv.ParseInt(env("ZEISH_PLAN_TEMPLATE_MIB", "65536"), 10, 64)
	if err != nil || mib < 0 {
		return o, fmt.Errorf("ZEISH_PLAN_TEMPLATE_MIB: want MiB of template images per account, 0 for no cap, got %q", os.Getenv("ZEISH_PLAN_TEMPLATE_MIB"))
	}
	o.Quota.Bytes = mib << 20
	if o.Quota.Uploads, err = strconv.Atoi(env("ZEISH_PLAN_TEMPLATE_UPLOADS", "2")); err != nil || o.Quota.Uploads < 0 {
		return o, fmt.Errorf("ZEISH_PLAN_TEMPLATE_UPLOADS: want a number of uploads per account at once, 0 for no cap, got %q", os.Getenv("ZEISH_PLAN_TEMPLATE_UPLOADS"))
	}
	return o, nil
}
