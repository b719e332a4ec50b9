package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/zeish/zeish/template/inroot"
	"golang.org/x/sys/unix"
)

// DiskMiB is the size of the base root filesystem. Sandboxes with bigger
// disks get a bigger overlay and the agent grows the filesystem online with
// the resize2fs shipped in the image.
const DiskMiB = 1024

type etcFile struct{ path, data string }

// etcFiles are the static configuration files of the base image. Hostname,
// hosts and resolv.conf are placeholders the agent rewrites per sandbox.
var etcFiles = []etcFile{
	{"/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
	{"/etc/group", "root:x:0:\nnogroup:x:65534:\n"},
	{"/etc/hostname", "zeish\n"},
	{"/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tzeish\n"},
	{"/etc/resolv.conf", "# replaced by sandboxd when the network is configured\nnameserver 10.0.2.3\n"},
	{"/etc/os-release", "NAME=\"zeish base\"\nID=zeish\nVERSION_ID=1\nPRETTY_NAME=\"zeish base\"\nHOME_URL=\"https://github.com/zeish/zeish\"\n"},
	{"/etc/profile", "export PATH=/usr/sbin:/usr/bin:/sbin:/bin\nexport HOME=${HOME:-/root}\n"},
}

// rootDirs are created with these permissions (umask does not apply).
var rootDirs = []struct {
	path string
	perm os.FileMode
}{
	{"bin", 0o755}, {"sbin", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
	{"etc", 0o755}, {"root", 0o700}, {"home", 0o755}, {"tmp", 0o777 | os.ModeSticky},
	{"var", 0o755}, {"var/tmp", 0o777 | os.ModeSticky}, {"proc", 0o555}, {"sys", 0o555},
	{"dev", 0o755}, {"run", 0o755}, {"mnt", 0o755},
}

// stageRootfs fills dir with the tree that mkfs.ext4 -d copies into the image.
func stageRootfs(ctx context.Context, dir string, in *inputs) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := inroot.Open(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range rootDirs {
		if err := guestDir(root, d.path, d.perm); err != nil {
			return err
		}
	}
	if err := writeGuestFile(root, "/bin/busybox", in.Busybox, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, in.BusyboxPath, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %w", in.BusyboxPath, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		// init is the agent's; linuxrc only matters for initrd images.
		if applet == "sbin/init" || applet == "linuxrc" || applet == "bin/busybox" {
			continue
		}
		if err := guestSymlink(root, "/"+applet, "/bin/busybox"); err != nil {
			return err
		}
	}
	// Real files replace applet symlinks of the same name.
	for _, f := range in.Resize2fs {
		if err := writeGuestFile(root, f.GuestPath, f.Data, 0o755); err != nil {
			return err
		}
	}
	if err := writeGuestFile(root, "/usr/sbin/sandboxd", in.Sandboxd, 0o755); err != nil {
		return err
	}
	if err := guestSymlink(root, "/sbin/init", "/usr/sbin/sandboxd"); err != nil {
		return err
	}
	for _, f := range etcFiles {
		if err := writeGuestFile(root, f.path, []byte(f.data), 0o644); err != nil {
			return err
		}
	}
	// resize2fs (online) and mount look for mounted filesystems here.
	return guestSymlink(root, "/etc/mtab", "/proc/self/mounts")
}

// guestParent opens the folder that holds guestPath inside root (making
// missing folders on the way) and returns it with the entry's name.
func guestParent(root *inroot.Root, guestPath string) (*inroot.Dir, string, error) {
	parent, name := path.Split(path.Clean("/" + guestPath))
	if name == "" {
		return nil, "", fmt.Errorf("guest path %q names the root", guestPath)
	}
	dir, err := root.Dir(parent, true)
	if err != nil {
		return nil, "", err
	}
	return dir, name, nil
}

// writeGuestFile writes data at guestPath in root, replacing a file or
// symlink there; the path is resolved inside root.
func writeGuestFile(root *inroot.Root, guestPath string, data []byte, perm os.FileMode) error {
	dir, name, err := guestParent(root, guestPath)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.WriteFile(name, data, perm)
}

// guestSymlink makes guestPath in root a symlink to target, replacing a
// file or symlink there.
func guestSymlink(root *inroot.Root, guestPath, target string) error {
	dir, name, err := guestParent(root, guestPath)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.Remove(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return dir.Symlink(target, name)
}

// guestDir makes the folder guestPath in root (its parents too) and gives
// it perm exactly (the umask does not apply); one already there keeps its
// contents.
func guestDir(root *inroot.Root, guestPath string, perm os.FileMode) error {
	dir, name, err := guestParent(root, guestPath)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.Mkdir(name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return dir.Chmod(name, unixMode(perm))
}

// unixMode is perm as chmod(2) takes it.
func unixMode(perm os.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if perm&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if perm&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

// makeDisk turns the staged tree into an ext4 filesystem without mounting
// anything (mkfs.ext4 -d), then into a qcow2 image that sandboxes' overlays
// use as their read-only backing file.
func makeDisk(ctx context.Context, stage, qcow2, hash string) error {
	return makeDiskSized(ctx, stage, qcow2, hash, DiskMiB)
}

// makeDiskSized is makeDisk for a filesystem of diskMiB.
func makeDiskSized(ctx context.Context, stage, qcow2, hash string, diskMiB int) error {
	mkfs, err := findTool("mkfs.ext4", "e2fsprogs")
	if err != nil {
		return err
	}
	qemuImg, err := findTool("qemu-img", "qemu-utils")
	if err != nil {
		return err
	}
	raw := qcow2 + ".raw"
	defer os.Remove(raw)
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(diskMiB) << 20) // sparse: only what mkfs writes takes space
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// A UUID derived from the hash keeps rebuilds of the same inputs alike.
	uuid := fmt.Sprintf("%s-%s-4%s-8%s-%s", hash[0:8], hash[8:12], hash[13:16], hash[17:20], hash[20:32])
	// -m 0: a sandbox has a single user, reserved blocks would only waste
	// space. root_owner: the root directory belongs to root even when the
	// builder is not root.
	if err := run(ctx, mkfs, "-q", "-F", "-t", "ext4", "-L", "zeish-root", "-m", "0", "-U", uuid,
		"-E", "root_owner=0:0,hash_seed="+uuid, "-d", stage, raw); err != nil {
		return err
	}
	if err := run(ctx, qemuImg, "convert", "-q", "-f", "raw", "-O", "qcow2", raw, qcow2); err != nil {
		return err
	}
	return syncFile(qcow2)
}

// findTool looks in PATH and then in the sbin folders, which are missing
// from PATH for non-root users on Debian.
func findTool(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found (apt-get install %s)", ErrMissingInput, name, pkg)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
