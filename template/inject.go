package template

import (
	"fmt"
	"os"
	"path"

	"github.com/zeish/zeish/template/inroot"
)

// injectAgent installs sandboxd and resize2fs (with its own libraries,
// started through its own loader) under injectDir, and the folders the
// guest's init mounts on, without replacing anything the image has. The
// image's tree is untrusted: every path is resolved inside root (its /etc
// may be a symlink to anywhere; it leads somewhere inside).
func injectAgent(root string, in *inputs) error {
	r, err := inroot.Open(root)
	if err != nil {
		return err
	}
	defer r.Close()
	top, err := r.Dir("", false)
	if err != nil {
		return err
	}
	defer top.Close()
	base := path.Base(injectDir)
	if top.Exists(base) {
		return fmt.Errorf("the image has %s, which zeish reserves: %w", injectDir, ErrBadImage)
	}
	if err := top.Mkdir(base, 0o755); err != nil {
		return err
	}
	if err := top.Chmod(base, 0o755); err != nil {
		return err
	}
	if err := writeGuestFile(r, injectDir+"/sandboxd", in.Sandboxd, 0o755); err != nil {
		return err
	}
	for _, f := range in.Resize2fs {
		dst := injectDir + "/lib/" + path.Base(f.GuestPath)
		if f.GuestPath == "/sbin/resize2fs" {
			dst = injectDir + "/resize2fs"
		}
		if err := writeGuestFile(r, dst, f.Data, 0o755); err != nil {
			return err
		}
	}
	// The initramfs moves /dev, /proc and /sys here; sandboxd mounts the
	// rest. Missing ones are made, existing ones (even symlinks) kept.
	for _, d := range []struct {
		name string
		perm os.FileMode
	}{{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"tmp", 0o777 | os.ModeSticky}, {"run", 0o755}, {"etc", 0o755}, {"root", 0o700}} {
		if top.Exists(d.name) {
			continue
		}
		if err := top.Mkdir(d.name, 0o755); err != nil {
			return err
		}
		if err := top.Chmod(d.name, unixMode(d.perm)); err != nil {
			return err
		}
	}
	// The agent rewrites hostname and hosts per sandbox; give images
	// without them a start (never replacing the image's own).
	etc, err := r.Dir("etc", true)
	if err != nil {
		return fmt.Errorf("/etc: %v: %w", err, ErrBadImage)
	}
	defer etc.Close()
	for _, f := range etcFiles {
		switch f.path {
		case "/etc/hostname", "/etc/hosts", "/etc/resolv.conf":
		default:
			continue
		}
		name := path.Base(f.path)
		if etc.Exists(name) {
			continue
		}
		if err := etc.WriteFile(name, []byte(f.data), 0o644); err != nil {
			return err
		}
	}
	return nil
}
