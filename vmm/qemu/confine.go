package qemu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/vmm"
)

// Confinement, like Firecracker's jailer: each QEMU runs
//   - as an unprivileged user (-run-with user=, -runas before 9.1), once its setup, which opens every
//     file it needs (kernel, disks, RAM file, sockets), is done;
//   - chrooted into its own VM folder (-run-with chroot=), so the only files it can
//     name afterwards are its own sockets and logs: a VMM escape sees
//     neither the data dir nor other sandboxes;
//   - in a cgroup of its own that caps its memory (guest RAM plus QEMU's
//     own) and CPU (its vCPUs plus one core for QEMU's own threads) and the
//     number of its tasks.
// Paths QEMU opens later (migration sockets) are therefore given relative
// to the VM folder: see guestPath.

// DefaultVMUser is the account confined VMMs run as.
const DefaultVMUser = "zeish-vm"

// vmmOverheadMiB is the memory a VMM may use beyond its guest's RAM: TCG's
// translation cache (capped by tb-size), device emulation, page tables.
const vmmOverheadMiB = 512

type confinement struct {
	user     string
	uid, gid int
	cgroups  cgroupLayout
	// cgroupsOptional starts VMs whose cgroup limits could not be set (each
	// failure logged); by default such a VM is not started: without its
	// limits one guest could take the host's memory, CPU or tasks.
	cgroupsOptional bool
	retrying        sync.WaitGroup // leave's background removals
}

// newConfinement prepares confinement, creating the VM user if it is
// missing (zeishd runs as root whenever it confines). Unless cgroups are
// optional, a host without the memory, cpu and pids controllers is refused.
func newConfinement(name string, cgroupsOptional bool) (*confinement, error) {
	layout := detectCgroups()
	if missing := layout.missing(); len(missing) > 0 && !cgroupsOptional {
		return nil, fmt.Errorf("no writable cgroup controller %s for the VMs' limits (ZEISH_CGROUPS=optional runs VMs without them)", strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("confinement needs root (to chroot and drop to another user)")
	}
	u, err := user.Lookup(name)
	if err != nil {
		out, cerr := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if cerr != nil {
			return nil, fmt.Errorf("create user %s: %v: %s", name, cerr, strings.TrimSpace(string(out)))
		}
		if u, err = user.Lookup(name); err != nil {
			return nil, err
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return nil, fmt.Errorf("user %s is root", name)
	}
	return &confinement{user: name, uid: uid, gid: gid, cgroups: layout, cgroupsOptional: cgroupsOptional}, nil
}

func (c *confinement) describe() string {
	s := "user " + c.user + ", chroot"
	switch {
	case c.cgroups.v2 != "":
		s += ", cgroup v2"
	case len(c.cgroups.v1) > 0:
		s += ", cgroup v1"
		for _, ctl := range []string{"memory", "cpu", "pids"} {
			if _, ok := c.cgroups.v1[ctl]; ok {
				s += " " + ctl
			}
		}
	}
	return s
}

// cgroupID names a VM's cgroup: one per VMM process, since a sandbox briefly
// has two while it is promoted, and never one a VMM had before. A name
// used again can meet the cgroup of that name still being removed (leave
// retries until init has reaped the old QEMU): the rmdir lands between the
// new VMM's mkdir and its writes ("pids.max: no such device", then
// "cgroup.procs: no such file"), or the new VMM joins a cgroup that still
// carries the old one's charged pages.
func cgroupID(h *vmm.Handle) string {
	if o := h.Origin; o != nil {
		return o.ID + "." + cgroupLeaf(o.Dir)
	}
	return h.Spec.ID + "." + cgroupLeaf(h.Spec.Dir)
}

// cgroupLeaf is the VM folder's part of its cgroup's name. A sandbox's VM
// folders are new for each VMM (vm-N, by generation), but every live
// capture's receiver is "rcv" inside that capture's image folder: its name
// carries a hash of the image folder too, so captures of one VM, one after
// the other, never share a cgroup (SettleCapture finds it again from the
// same folder).
func cgroupLeaf(dir string) string {
	base := filepath.Base(dir)
	if base != receiverDirName {
		return base
	}
	parent := filepath.Dir(dir)
	if abs, err := filepath.Abs(parent); err == nil {
		parent = abs
	}
	sum := sha256.Sum256([]byte(parent))
	return base + "-" + hex.EncodeToString(sum[:6])
}

// own hands a socket zeishd made in a VM folder to the VM user.
func (c *confinement) own(path string) error {
	if c == nil {
		return nil
	}
	return os.Chown(path, c.uid, c.gid)
}

// args are the extra QEMU arguments for a VM in dir. QEMU 9.1 replaced
// -runas and -chroot (gone in 10) with -run-with.
func (c *confinement) args(dir string, v version) []string {
	if v.atLeast(9, 1) {
		return []string{"-run-with", "user=" + c.user + ",chroot=" + dir}
	}
	return []string{"-runas", c.user, "-chroot", dir}
}

// prepareDir gives the VM user its folder (and nothing above it).
func (c *confinement) prepareDir(dir string) error {
	if err := os.Chown(dir, c.uid, c.gid); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

// guestPath is how QEMU names a file of its VM folder after its setup: from
// inside its chroot when it is confined.
func (d *Driver) guestPath(h *vmm.Handle, path string) string {
	if !h.Confined {
		return path
	}
	rel, err := filepath.Rel(h.Spec.Dir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return "/" + rel
}

// cgroupLayout says where this host's cgroups are: one unified (v2) tree,
// or v1 hierarchies per controller. Empty when neither is writable.
type cgroupLayout struct {
	v2 string            // e.g. /sys/fs/cgroup
	v1 map[string]string // controller → mount, e.g. memory → /sys/fs/cgroup/memory
}

const cgroupName = "zeish"

func detectCgroups() cgroupLayout {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err == nil && strings.Contains(string(b), "memory") {
			// Let our subtree use the controllers it needs.
			os.MkdirAll(filepath.Join(root, cgroupName), 0o755)
			os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory +cpu +pids"), 0)
			os.WriteFile(filepath.Join(root, cgroupName, "cgroup.subtree_control"), []byte("+memory +cpu +pids"), 0)
			return cgroupLayout{v2: root}
		}
	}
	v1 := map[string]string{}
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		mnt := filepath.Join("/sys/fs/cgroup", ctl)
		if fi, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err == nil && !fi.IsDir() {
			v1[ctl] = mnt
		}
	}
	return cgroupLayout{v1: v1}
}

// missing lists the controllers the VMs' limits need that l lacks.
func (l cgroupLayout) missing() []string {
	if l.v2 != "" {
		return nil // detectCgroups enabled memory, cpu and pids for our subtree
	}
	var out []string
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		if _, ok := l.v1[ctl]; !ok {
			out = append(out, ctl)
		}
	}
	return out
}

// dirs are the cgroup folders of VM id.
func (l cgroupLayout) dirs(id string) []string {
	if l.v2 != "" {
		return []string{filepath.Join(l.v2, cgroupName, id)}
	}
	var out []string
	for _, mnt := range l.v1 {
		out = append(out, filepath.Join(mnt, cgroupName, id))
	}
	return out
}

// limits are the files to write in a VM's cgroup.
func (l cgroupLayout) limits(ctl string, spec vmm.Spec) map[string]string {
	mem := strconv.FormatInt(int64(spec.MemoryMiB+vmmOverheadMiB)<<20, 10)
	// One core per vCPU plus one for QEMU's own threads (main loop, I/O,
	// migration): capping it at its vCPUs slowed a TCG boot by ~0.8 s.
	quota := strconv.Itoa((spec.VCPUs + 1) * 100000)
	if l.v2 != "" {
		return map[string]string{"memory.max": mem, "cpu.max": quota + " 100000", "pids.max": "1024"}
	}
	switch ctl {
	case "memory":
		return map[string]string{"memory.limit_in_bytes": mem}
	case "cpu":
		return map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota}
	case "pids":
		return map[string]string{"pids.max": "1024"}
	}
	return nil
}

// enter puts pid (and its threads) into VM id's cgroups, made with limits
// for spec, and returns every step that failed (see join).
func (c *confinement) enter(id string, pid int, spec vmm.Spec) []error {
	var errs []error
	try := func(dir, ctl string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			return
		}
		for file, value := range c.cgroups.limits(ctl, spec) {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", file, err))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			errs = append(errs, fmt.Errorf("join %s: %w", dir, err))
		}
	}
	if c.cgroups.v2 != "" {
		try(filepath.Join(c.cgroups.v2, cgroupName, id), "")
		return errs
	}
	for ctl, mnt := range c.cgroups.v1 {
		try(filepath.Join(mnt, cgroupName, id), ctl)
	}
	return errs
}

// join is enter for a VM being started: any failure fails the start
// unless cgroups are optional, when it is logged and the VM runs without
// that limit.
func (c *confinement) join(id string, pid int, spec vmm.Spec, log *slog.Logger) error {
	errs := c.enter(id, pid, spec)
	if len(errs) == 0 {
		return nil
	}
	if c.cgroupsOptional {
		for _, err := range errs {
			log.Warn("vm cgroup: running without this limit (ZEISH_CGROUPS=optional)", logKeySandbox, spec.ID, "err", err)
		}
		return nil
	}
	return fmt.Errorf("vm cgroup limits: %w (ZEISH_CGROUPS=optional runs VMs without them)", errors.Join(errs...))
}

// leave removes VM id's cgroups once its process is gone. The kernel
// refuses (EBUSY) until the exited QEMU has been reaped by its parent (init,
// for a daemon), which can take a while, so it retries in the background.
func (c *confinement) leave(id string) {
	dirs := c.cgroups.dirs(id)
	if removeCgroups(dirs) {
		return
	}
	c.retrying.Add(1)
	go func() {
		defer c.retrying.Done()
		for deadline := time.Now().Add(cgroupRetry); time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			if removeCgroups(dirs) {
				return
			}
		}
	}()
}

// cgroupRetry is how long leave keeps trying; sweep gets the rest.
const cgroupRetry = time.Minute

// removeCgroups removes what it can of dirs and reports whether all are gone.
func removeCgroups(dirs []string) bool {
	gone := true
	for _, dir := range dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			gone = false
		}
	}
	return gone
}

// sweep removes VM cgroups left by a zeishd that crashed or stopped before
// leave succeeded. The kernel refuses to remove a cgroup that holds a
// process, so no live VM loses its own; the age spares one that another
// zeishd on this host created a moment ago and is about to join.
func (c *confinement) sweep() {
	for _, parent := range c.cgroups.dirs("") {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && e.IsDir() && time.Since(info.ModTime()) > cgroupRetry {
				os.Remove(filepath.Join(parent, e.Name()))
			}
		}
	}
}
