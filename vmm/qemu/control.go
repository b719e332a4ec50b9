package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

// Bounds of Destroy's escalation.
const (
	quitTimeout    = 3 * time.Second // QMP quit round trip
	quitGrace      = 5 * time.Second // for the process to exit after quit
	destroyTimeout = 5 * time.Second // for SIGKILL to take effect
)

// Alive reports whether h.PID is a live QEMU carrying h's -name and QMP
// socket, so a reused pid is never taken for our VM.
func (d *Driver) Alive(h *vmm.Handle) bool {
	return h != nil && isOurs(h.PID, idOf(h))
}

// Pause stops the guest's vCPUs (QMP stop).
func (d *Driver) Pause(ctx context.Context, h *vmm.Handle) error {
	return d.command(ctx, h, "stop")
}

// Resume lets the guest's vCPUs run again (QMP cont).
func (d *Driver) Resume(ctx context.Context, h *vmm.Handle) error {
	return d.command(ctx, h, "cont")
}

// State reports query-status as a vmm.RunState.
func (d *Driver) State(ctx context.Context, h *vmm.Handle) (vmm.RunState, error) {
	if !d.Alive(h) {
		return "", fmt.Errorf("vm %q state: %w: qemu is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	var st qmpStatus
	if err := d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		return m.execute(ctx, "query-status", nil, &st)
	}); err != nil {
		return "", fmt.Errorf("vm %q state: %w", h.Spec.ID, err)
	}
	switch st.Status {
	case "running":
		return vmm.RunStateRunning, nil
	case "paused":
		return vmm.RunStatePaused, nil
	}
	return vmm.RunStateOther, nil
}

func (d *Driver) command(ctx context.Context, h *vmm.Handle, cmd string) error {
	if !d.Alive(h) {
		return fmt.Errorf("vm %q %s: %w: qemu is not running", h.Spec.ID, cmd, errdefs.ErrUnavailable)
	}
	if err := d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		return m.execute(ctx, cmd, nil, nil)
	}); err != nil {
		return fmt.Errorf("vm %q: %w", h.Spec.ID, err)
	}
	return nil
}

// DialAgent connects to the guest agent's virtio-serial port. QEMU serves
// one client at a time on it: keep the connection, do not dial per message.
func (d *Driver) DialAgent(ctx context.Context, h *vmm.Handle) (net.Conn, error) {
	if !d.Alive(h) {
		return nil, fmt.Errorf("vm %q agent: %w: qemu is not running", h.Spec.ID, errdefs.ErrUnavailable)
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", h.AgentSocket)
	if err != nil {
		return nil, fmt.Errorf("vm %q agent: %w: %w", h.Spec.ID, errdefs.ErrUnavailable, err)
	}
	return c, nil
}

// Destroy asks QEMU to quit, waits a bounded time, then kills it, and removes
// every file the driver made for h. Teardown completes even if ctx ends
// (ctx only shortens the polite phase); a VM already gone is not an error.
func (d *Driver) Destroy(ctx context.Context, h *vmm.Handle) error {
	log := d.log.With(logKeySandbox, h.Spec.ID, logKeyPID, h.PID)
	id := idOf(h)
	var errs []error
	if d.Alive(h) {
		qctx, cancel := context.WithTimeout(ctx, quitTimeout)
		err := d.withMonitor(qctx, h.QMPSocket, func(m *monitor) error {
			return m.execute(qctx, "quit", nil, nil)
		})
		cancel()
		// After quit QEMU may close the socket before its reply arrives.
		if err != nil && d.Alive(h) {
			log.Warn("qmp quit failed; killing", "err", err)
		}
		if err == nil && !waitGoneCtx(ctx, h.PID, id, quitGrace) {
			log.Warn("qemu ignored quit; killing")
		}
	}
	if d.Alive(h) {
		_ = syscall.Kill(h.PID, syscall.SIGKILL)
		if !waitGone(h.PID, id, destroyTimeout) {
			errs = append(errs, fmt.Errorf("qemu pid %d survived SIGKILL", h.PID))
		}
	}
	// A launch that never recorded its pid, or a pidfile that disagrees.
	if err := killTagged(id); err != nil {
		errs = append(errs, err)
	}
	d.forgetQMP(h.QMPSocket)
	d.releaseSource(h)
	if h.Confined && d.confine != nil {
		d.confine.leave(cgroupID(h))
	}
	if err := removeFiles(d.ownedFiles(h)...); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy vm %q: %w", h.Spec.ID, err)
	}
	log.Info("vm destroyed")
	return nil
}

// ownedFiles lists the files Destroy removes. Paths come from a persisted
// handle, so only names this driver gives its files are accepted.
func (d *Driver) ownedFiles(h *vmm.Handle) []string {
	files := []string{pidFile(h), d.ConsoleLog(h)}
	inDir := func(p, name string) {
		if p != "" && filepath.Base(p) == name && filepath.Dir(p) == h.Spec.Dir {
			files = append(files, p)
		}
	}
	inDir(h.QMPSocket, qmpName)
	inDir(h.AgentSocket, agentName)
	inDir(h.Disk, diskName)
	inDir(migrateSocket(h), migrateSockName)
	inDir(filepath.Join(h.Spec.Dir, saveSockName), saveSockName)
	inDir(filepath.Join(h.Spec.Dir, relaySockName), relaySockName)
	inDir(filepath.Join(h.Spec.Dir, kernelStubName), kernelStubName)
	if base := filepath.Base(h.MemFile); h.MemShared && strings.HasPrefix(base, "zeish-"+h.Spec.ID+"-") &&
		strings.HasSuffix(base, ".mem") && filepath.Dir(h.MemFile) == d.shmDir {
		files = append(files, h.MemFile)
	}
	if h.Spec.Dir == "" {
		return nil // relative names would hit the working directory
	}
	return files
}

// waitGoneCtx is waitGone that also stops when ctx ends.
func waitGoneCtx(ctx context.Context, pid int, id identity, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !isOurs(pid, id) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
