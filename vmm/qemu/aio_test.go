package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDiskAIO: where io_uring works (the driver's probe), a VM opens its
// overlay with it (an io_uring ring among its descriptors); where it does
// not, and for a driver asked for threads, QEMU keeps its default.
func TestDiskAIO(t *testing.T) {
	d := newTestDriver(t)
	probed := d.aio // where the probe found no io_uring, "auto" must mean threads
	rings := func(pid int) int {
		n := 0
		fds, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); strings.Contains(l, "io_uring") {
				n++
			}
		}
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		aio   string
		rings bool
	}{{"auto", probed, probed != ""}, {"threads", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d.aio = tc.aio
			h, err := d.Start(ctx, newTestSpec(t))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Destroy(ctx, h)
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(h.PID), "cmdline"))
			if got := strings.Contains(string(cmdline), "aio=io_uring"); got != tc.rings {
				t.Errorf("command line asks for io_uring: %v, want %v", got, tc.rings)
			}
			if got := rings(h.PID) > 0; got != tc.rings {
				t.Errorf("io_uring rings open: %v, want %v", got, tc.rings)
			}
		})
	}
}
