package template

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// builderVersion is part of the hash: bump it whenever this package changes
// what it puts into a build, so hosts rebuild instead of reusing stale output.
const builderVersion = "zeish-base-3"

// ErrMissingInput says a host file the build needs is absent; the message
// names the Debian package that provides it.
var ErrMissingInput = errors.New("template input missing")

// guestModules are loaded by /init in this order (virtio_ring before virtio,
// else "unknown symbol"). Names are module file names without ".ko".
var guestModules = []string{
	"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
	"virtio_blk", "virtio_console", "failover", "net_failover", "virtio_net", "virtio-rng",
}

// requiredModules must exist as a module or be built in: without them the
// guest has no root disk or no agent channel.
var requiredModules = map[string]bool{
	"virtio_ring": true, "virtio": true, "virtio_pci": true, "virtio_blk": true, "virtio_console": true,
}

// hostFile is one file copied from the host into a guest image.
type hostFile struct {
	GuestPath string
	HostPath  string
	Data      []byte
}

// inputs is everything a base build reads; hash() covers all of it.
type inputs struct {
	KernelPath  string
	Kernel      []byte
	Release     string
	Modules     []hostFile // initramfs /lib/modules/<name>.ko, in load order
	BusyboxPath string
	Busybox     []byte
	Sandboxd    []byte
	Resize2fs   []hostFile // /sbin/resize2fs, its libraries and the loader
}

// gatherInputs reads every input from the host and checks that it is usable.
func gatherInputs(ctx context.Context, opts BaseOptions) (*inputs, error) {
	in := &inputs{}
	var err error
	if in.KernelPath = opts.KernelPath; in.KernelPath == "" {
		if in.KernelPath, err = defaultKernel("/boot"); err != nil {
			return nil, err
		}
	}
	if in.Kernel, err = readInput(in.KernelPath, "linux-image-cloud-amd64"); err != nil {
		return nil, err
	}
	if in.Release, err = kernelRelease(in.Kernel, in.KernelPath); err != nil {
		return nil, err
	}
	if in.Modules, err = findModules(filepath.Join("/lib/modules", in.Release)); err != nil {
		return nil, err
	}
	if in.BusyboxPath = opts.BusyboxPath; in.BusyboxPath == "" {
		in.BusyboxPath = "/bin/busybox"
	}
	if in.Busybox, err = readInput(in.BusyboxPath, "busybox-static"); err != nil {
		return nil, err
	}
	if err := checkStatic(in.BusyboxPath, "install busybox-static, not busybox"); err != nil {
		return nil, err
	}
	if opts.SandboxdPath == "" {
		return nil, fmt.Errorf("%w: BaseOptions.SandboxdPath is empty (build ./cmd/sandboxd with CGO_ENABLED=0)", ErrMissingInput)
	}
	if in.Sandboxd, err = readInput(opts.SandboxdPath, "zeish (go build ./cmd/sandboxd)"); err != nil {
		return nil, err
	}
	if err := checkStatic(opts.SandboxdPath, "build it with CGO_ENABLED=0"); err != nil {
		return nil, err
	}
	if in.Resize2fs, err = findResize2fs(ctx); err != nil {
		return nil, err
	}
	return in, nil
}

// findModules resolves guestModules in modules.dep, skipping those built into
// the kernel, and checks that each one's dependencies load before it.
func findModules(modDir string) ([]hostFile, error) {
	deps, err := readModulesDep(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin, _ := readModulesDep(filepath.Join(modDir, "modules.builtin"))
	var out []hostFile
	loaded := map[string]bool{}
	for _, name := range guestModules {
		key := modKey(name)
		entry, ok := deps[key]
		if !ok {
			if _, isBuiltin := builtin[key]; !isBuiltin && requiredModules[name] {
				return nil, fmt.Errorf("%w: kernel module %s is neither in %s nor built in (apt-get install linux-image-cloud-amd64)", ErrMissingInput, name, modDir)
			}
			continue
		}
		for _, dep := range entry.deps {
			if !loaded[dep] {
				return nil, fmt.Errorf("kernel module %s needs %s, which /init does not load before it", name, dep)
			}
		}
		if !strings.HasSuffix(entry.path, ".ko") {
			return nil, fmt.Errorf("kernel module %s is compressed (%s): busybox insmod needs plain .ko files", name, entry.path)
		}
		hostPath := filepath.Join(modDir, entry.path)
		data, err := readInput(hostPath, "linux-image-cloud-amd64")
		if err != nil {
			return nil, err
		}
		out = append(out, hostFile{GuestPath: "/lib/modules/" + name + ".ko", HostPath: hostPath, Data: data})
		loaded[key] = true
	}
	return out, nil
}

type modEntry struct {
	path string
	deps []string // modKeys
}

// readModulesDep parses modules.dep (or modules.builtin, which has no colon)
// into entries keyed by modKey.
func readModulesDep(file string) (map[string]modEntry, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %s not found (apt-get install linux-image-cloud-amd64)", ErrMissingInput, file)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]modEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		modPath, depList, _ := strings.Cut(sc.Text(), ":")
		e := modEntry{path: strings.TrimSpace(modPath)}
		for _, d := range strings.Fields(depList) {
			e.deps = append(e.deps, modKey(d))
		}
		m[modKey(e.path)] = e
	}
	return m, sc.Err()
}

// modKey normalises a module path or name the way the kernel does: no
// directory, no .ko[.xz|.zst|.gz] suffix, '-' equal to '_'.
func modKey(p string) string {
	base := path.Base(p)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// checkStatic refuses dynamically linked binaries: the initramfs and the agent
// run before (or without) any shared libraries in the guest.
func checkStatic(file, hint string) error {
	f, err := elf.Open(file)
	if err != nil {
		return fmt.Errorf("%s: not an ELF executable: %w", file, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s: built for %s, the guest is x86-64", file, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: %s", file, hint)
		}
	}
	return nil
}

// findResize2fs collects the host's resize2fs and everything ldd says it
// loads, to be installed at the same paths in the guest: the agent grows the
// root filesystem online when a sandbox's disk is larger than the base.
func findResize2fs(ctx context.Context) ([]hostFile, error) {
	bin := ""
	for _, c := range []string{"/usr/sbin/resize2fs", "/sbin/resize2fs"} {
		if _, err := os.Stat(c); err == nil {
			bin = c
			break
		}
	}
	if bin == "" {
		p, err := exec.LookPath("resize2fs")
		if err != nil {
			return nil, fmt.Errorf("%w: resize2fs not found (apt-get install e2fsprogs)", ErrMissingInput)
		}
		bin = p
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w (apt-get install libc-bin)", bin, err)
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	files := []hostFile{{GuestPath: "/sbin/resize2fs", HostPath: bin}}
	for _, l := range libs {
		files = append(files, hostFile{GuestPath: l, HostPath: l})
	}
	for i := range files {
		// ReadFile follows symlinks (the loader is one on Debian), so the
		// guest gets a real file at the path the binary asks for.
		if files[i].Data, err = readInput(files[i].HostPath, "e2fsprogs"); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// parseLdd returns the absolute paths of the libraries and the loader in ldd
// output; the vDSO has no file and is skipped.
func parseLdd(out string) ([]string, error) {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "linux-vdso") {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("missing library: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "/") {
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, errors.New("no libraries listed (a static resize2fs needs none, but ldd said nothing usable)")
	}
	return libs, nil
}

// hash is the content hash of everything that ends up in a build. Paths are
// included only where they are guest paths: moving a host file without
// changing it does not force a rebuild.
func (in *inputs) hash() string {
	h := sha256.New()
	field := func(label string, data []byte) {
		writeField(h, label)
		writeField(h, string(data))
	}
	field("builder", []byte(builderVersion))
	field("kernel-args", []byte(KernelArgs))
	field("init", []byte(initScript))
	for _, f := range etcFiles {
		field("etc:"+f.path, []byte(f.data))
	}
	field("kernel", in.Kernel)
	field("release", []byte(in.Release))
	for _, m := range in.Modules {
		field("module:"+m.GuestPath, m.Data)
	}
	field("busybox", in.Busybox)
	field("sandboxd", in.Sandboxd)
	for _, f := range in.Resize2fs {
		field("resize2fs:"+f.GuestPath, f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeField length-prefixes each value so that no two different input sets
// can produce the same byte stream.
func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}
