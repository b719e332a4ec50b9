package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeish/zeish/guest"
	"golang.org/x/sys/unix"
)

// findPort returns the device of the virtio-serial port with that name.
// There is no udev in the guest, so sysfs is the only place the name is.
func findPort(dir, name string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("no virtio port named %q in %s", name, dir)
}

// openPort opens the port in blocking mode, outside Go's poller: a blocking
// read either waits for the host or returns 0 when none is attached, which
// is exactly what the agent's retry loop expects. The file stays open for
// the agent's whole life (re-opening it per message lost messages).
func openPort(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// serveAgentPort waits for the agent port to appear (the virtio_console
// module may still be loading), then serves it.
func serveAgentPort(ctx context.Context, log *slog.Logger, srv *guest.Server) error {
	logged := false
	for {
		path, err := findPort("/sys/class/virtio-ports", portName)
		if err == nil {
			return servePort(ctx, log, srv, path)
		}
		if !logged {
			log.Warn("waiting for the agent port", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
