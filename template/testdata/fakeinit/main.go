// Command fakeinit stands in for sandboxd as /sbin/init in boot tests: it
// proves the initramfs reached the root disk, then powers the VM off so QEMU
// exits on its own.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	// The agent channel and the NIC prove virtio_console and virtio_net loaded.
	var ports []string
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		b, _ := os.ReadFile(n)
		ports = append(ports, strings.TrimSpace(string(b)))
	}
	var nics []string
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		nics = append(nics, l.Name())
	}
	msg := fmt.Sprintf("ZEISH-INIT-OK pid=%d release=%s ports=%s net=%s\n",
		os.Getpid(), release, strings.Join(ports, ","), strings.Join(nics, ","))
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		c.WriteString(msg)
		c.Sync()
		c.Close()
	} else {
		os.Stdout.WriteString(msg)
	}
	// Give the UART a moment to drain before the machine disappears.
	time.Sleep(200 * time.Millisecond)
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintln(os.Stderr, "fakeinit: poweroff:", err)
	}
	select {}
}
