package template

import (
	"bufio"
	"compress/gzip"
	"os"
	"strings"
)

// KernelArgs is the command line every base sandbox boots with. It is static
// on purpose: per-sandbox settings (hostname, network, secrets) arrive later
// over the agent channel, so that forks of one running VM stay valid.
// quiet/loglevel=1 save about a second under TCG (printk to the emulated UART
// is slow): only emergencies reach the console. Not loglevel=0: a panic
// raises the console's level only when it is non-zero, so at 0 a guest dies
// in silence and a failed boot cannot say why. panic=-1 reboots at once on a
// panic, which QEMU's -no-reboot turns into an exit instead of a hang.
// hpet=disable keeps the guest off the HPET: once a guest enables it,
// QEMU's emulated HPET wakes QEMU's main loop ~250 times a second for the
// VM's whole life, idle or not (measured under TCG: an idle VM's QEMU used
// 2.7 % of a core with it, 0.5 % without; 80 idle fork children loaded a
// 2-core host to 105). The guest keeps the TSC as its clock and the local
// APIC for its timers; a fork child inherits its parent's choice.
const KernelArgs = "console=ttyS0 quiet loglevel=1 panic=-1 hpet=disable"

// initScript is /init in the initramfs. Contract: load the virtio drivers in
// dependency order (skipping any not shipped because they are built in), wait
// for the virtio-blk root disk /dev/vda, mount it ext4 read-write, move /dev,
// /proc and /sys into it and switch_root to its /sbin/init. Any failure prints
// "zeish-init: FATAL: ..." on the console and powers the VM off, so QEMU exits
// instead of hanging.
var initScript = initScriptFor("/sbin/init")

// initScriptFor is the /init script that hands over to initPath on the root
// disk (base: /sbin/init; OCI templates: zeish's own, beside the image's).
func initScriptFor(initPath string) string {
	return strings.NewReplacer("@MODULES@", strings.Join(guestModules, " "), "@INIT@", initPath).Replace(`#!/bin/sh
# zeish base initramfs: virtio drivers, root disk /dev/vda, switch_root.
export PATH=/bin

fail() {
	echo "zeish-init: FATAL: $*" >/dev/console
	poweroff -f
	# poweroff -f does not return; if it did, exiting PID 1 panics the
	# kernel and panic=-1 with QEMU -no-reboot still ends the VM.
	exit 1
}

mount -t devtmpfs devtmpfs /dev || fail "cannot mount devtmpfs on /dev"
mount -t proc proc /proc || fail "cannot mount /proc"
mount -t sysfs sysfs /sys || fail "cannot mount /sys"

# Order matters: virtio_ring before virtio, else "unknown symbol".
for m in @MODULES@; do
	[ -f /lib/modules/$m.ko ] || continue # built into this kernel
	insmod /lib/modules/$m.ko || echo "zeish-init: warning: insmod $m failed" >/dev/console
done

# The disk appears asynchronously after virtio_blk probes it.
i=0
while [ ! -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -le 400 ] || fail "no root disk /dev/vda after 20s (attach it as virtio-blk)"
	usleep 50000
done

mount -t ext4 -o rw /dev/vda /newroot || fail "cannot mount /dev/vda (ext4) on /newroot"
[ -e /newroot@INIT@ ] || [ -L /newroot@INIT@ ] || fail "no @INIT@ on the root disk"
for d in dev proc sys; do
	mount --move /$d /newroot/$d || fail "cannot move /$d to the root disk"
done
exec switch_root /newroot @INIT@
fail "switch_root to @INIT@ failed"
`)
}

// initramfsApplets are the busybox applets /init uses.
var initramfsApplets = []string{"sh", "mount", "insmod", "usleep", "sleep", "switch_root", "poweroff", "cat", "ls"}

// writeInitramfs writes the gzip'd newc archive to file.
func writeInitramfs(file string, in *inputs) error {
	return writeInitramfsFor(file, in, "/sbin/init")
}

// writeInitramfsFor writes an initramfs whose /init starts initPath.
func writeInitramfsFor(file string, in *inputs, initPath string) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	gz, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed) // the kernel unpacks; speed over size
	c := &cpioWriter{w: gz}
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"} {
		c.Dir(d, 0o755)
	}
	// The kernel opens /dev/console for init's stdio before devtmpfs is
	// mounted, so the node must be in the archive itself.
	c.CharDev("dev/console", 0o600, 5, 1)
	c.CharDev("dev/null", 0o666, 1, 3)
	c.File("bin/busybox", 0o755, in.Busybox)
	for _, a := range initramfsApplets {
		c.Symlink("bin/"+a, "busybox")
	}
	for _, m := range in.Modules {
		c.File(m.GuestPath, 0o644, m.Data)
	}
	c.File("init", 0o755, []byte(initScriptFor(initPath)))
	if err := c.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Sync()
}
