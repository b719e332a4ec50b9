package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// debianBuilderVersion is part of the debian build's hash; bump it when
// this file changes what it builds.
const debianBuilderVersion = "zeish-debian-1"

// DebianDiskMiB is the debian template's root filesystem size: the
// userland takes about 500 MiB; the rest is room before the sandbox's own
// disk size grows it.
const DebianDiskMiB = 1536

// DebianPackages are installed on top of Debian's minbase variant.
var DebianPackages = []string{
	"bash", "coreutils", "python3", "python3-pip", "python3-venv", "git", "curl", "wget", "ca-certificates",
	"openssh-client", "procps", "iproute2", "less", "sudo", "xz-utils", "tar", "gzip", "findutils", "grep", "sed",
}

// DebianUser is the unprivileged account of the debian template: uid 1000,
// home /home/user, passwordless sudo.
const DebianUser = "user"

// debianHooks run in the new root (as mmdebstrap --customize-hook) after
// the packages are in. Nothing starts at boot but sandboxd (it is PID 1; no
// systemd, so no NTP client, apt timers or cloud-init), so nothing is
// disabled here.
var debianHooks = []string{
	`chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash --groups sudo ` + DebianUser,
	`echo "` + DebianUser + ` ALL=(ALL) NOPASSWD:ALL" > "$1/etc/sudoers.d/` + DebianUser + `" && chmod 0440 "$1/etc/sudoers.d/` + DebianUser + `"`,
	// The agent writes hostname, hosts and resolv.conf per sandbox.
	`rm -f "$1/etc/resolv.conf" "$1/etc/hostname"`,
	// Docs and caches are dead weight in a sandbox image.
	`rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/var/cache/apt/*.bin "$1"/var/lib/apt/lists/*`,
}

// DebianOptions say how to build the debian template, or a template
// derived from it (more packages, a bigger disk; see DesktopOptions).
type DebianOptions struct {
	Base  BaseOptions
	Suite string // default the host's VERSION_CODENAME
	// Name is the build's kind in the cache folder's name; default "debian".
	Name string
	// Extra packages, e.g. build-essential.
	Extra []string
	// Hooks run after debianHooks, like them (mmdebstrap --customize-hook).
	Hooks []string
	// DiskMiB is the root filesystem's size; default DebianDiskMiB.
	DiskMiB  int
	Progress func(Progress)
}

func (o *DebianOptions) name() string {
	if o.Name == "" {
		return "debian"
	}
	return o.Name
}

func (o *DebianOptions) diskMiB() int {
	if o.DiskMiB == 0 {
		return DebianDiskMiB
	}
	return o.DiskMiB
}

// BuildDebian returns the cached debian template (or the derived template
// opts describe), building it with
// mmdebstrap from the host's apt sources when its inputs changed: the
// package list, the hooks, the base inputs (kernel, agent) and the apt
// index the host last fetched (its InRelease files).
func BuildDebian(ctx context.Context, opts DebianOptions) (*Artifacts, error) {
	log := opts.Base.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	name, diskMiB := opts.name(), opts.diskMiB()
	mmdebstrap, err := findTool("mmdebstrap", "mmdebstrap")
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	if opts.Suite == "" {
		if opts.Suite, err = hostSuite(); err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
	}
	in, err := gatherInputs(ctx, opts.Base)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	hooks := append(append([]string{}, debianHooks...), opts.Hooks...)
	pkgs := append(append([]string{}, DebianPackages...), opts.Extra...)
	sort.Strings(pkgs)
	h := sha256.New()
	writeField(h, debianBuilderVersion)
	writeField(h, in.hash())
	writeField(h, opts.Suite)
	writeField(h, strings.Join(pkgs, ","))
	writeField(h, strings.Join(hooks, "\n"))
	writeField(h, strconv.Itoa(diskMiB))
	releases, _ := filepath.Glob("/var/lib/apt/lists/*InRelease")
	sort.Strings(releases)
	for _, r := range releases {
		b, _ := os.ReadFile(r)
		writeField(h, filepath.Base(r))
		writeField(h, string(b))
	}
	hash := hex.EncodeToString(h.Sum(nil))
	start := time.Now()
	// Derived templates' builds are kinds of debian ("debian-desktop"): a
	// base build sweeping stale temps of crashed builds spares every
	// "debian-" kind, even in a zeishd that predates the derived ones.
	kind := name
	if kind != "debian" {
		kind = "debian-" + name
	}
	a, built, err := ensureKind(ctx, log, opts.Base.CacheDir, kind, hash, func(ctx context.Context, dir string) (*manifest, error) {
		log.Info("template: building "+name, keyHash, hash[:12], "suite", opts.Suite, "packages", len(pkgs))
		return buildDebian(ctx, log, dir, in, mmdebstrap, debootstrap{suite: opts.Suite, pkgs: pkgs, hooks: hooks, diskMiB: diskMiB}, hash, progress)
	})
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	if built {
		log.Info("template: "+name+" built", keyDir, a.Dir, keyTook, time.Since(start).Round(time.Millisecond))
	}
	progress(Progress{Step: "done"})
	return a, nil
}

func hostSuite() (string, error) {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok && v != "" {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", fmt.Errorf("%w: no VERSION_CODENAME in /etc/os-release (set the suite)", ErrMissingInput)
}

// debootstrap is what mmdebstrap makes: the suite, its packages, the hooks
// and the size of the disk they go on.
type debootstrap struct {
	suite   string
	pkgs    []string
	hooks   []string
	diskMiB int
}

func buildDebian(ctx context.Context, log *slog.Logger, dir string, in *inputs, mmdebstrap string, d debootstrap,
	hash string, progress func(Progress)) (*manifest, error) {
	suite, pkgs, diskMiB := d.suite, d.pkgs, d.diskMiB
	m := &manifest{Kernel: "vmlinuz", Initrd: "initrd.img", BaseDisk: "base.qcow2",
		KernelArgs: KernelArgs, KernelRelease: in.Release, DiskMiB: diskMiB}
	if err := os.WriteFile(filepath.Join(dir, m.Kernel), in.Kernel, 0o644); err != nil {
		return nil, err
	}
	if err := writeInitramfsFor(filepath.Join(dir, m.Initrd), in, injectDir+"/sandboxd"); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	tarball := filepath.Join(dir, "rootfs.tar")
	defer os.Remove(tarball)
	args := []string{"--variant=minbase", "--include=" + strings.Join(pkgs, ","),
		`--aptopt=APT::Install-Recommends "false"`, "--quiet"}
	for _, hook := range d.hooks {
		args = append(args, "--customize-hook="+hook)
	}
	args = append(args, suite, tarball)
	progress(Progress{Step: "debootstrap", Message: "mmdebstrap " + suite + ": " + strings.Join(pkgs, " ")})
	step := time.Now()
	cmd := exec.CommandContext(ctx, mmdebstrap, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+dir) // its chroot lives beside the build, not in /tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mmdebstrap: %w: %s", err, tail(string(out), 2000))
	}
	log.Info("template: step done", keyStep, "mmdebstrap", keyTook, time.Since(step).Round(time.Millisecond))
	stage := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	f, err := os.Open(tarball)
	if err != nil {
		return nil, err
	}
	u := newUnpacker(stage, int64(diskMiB)<<20*92/100)
	defer u.close()
	err = u.apply(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("unpack the root filesystem: %w", err)
	}
	u.finish()
	progress(Progress{Step: "inject", Message: "installing sandboxd in " + injectDir})
	if err := injectAgent(stage, in); err != nil {
		return nil, fmt.Errorf("inject agent: %w", err)
	}
	progress(Progress{Step: "disk", Message: fmt.Sprintf("making a %d MiB ext4 disk", diskMiB)})
	if err := makeDiskSized(ctx, stage, filepath.Join(dir, m.BaseDisk), hash, diskMiB); err != nil {
		return nil, fmt.Errorf("root disk: %w", err)
	}
	return m, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
