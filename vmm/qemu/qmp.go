package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/digitalocean/go-qemu/qmp"

	"github.com/zeish/zeish/errdefs"
)

// qmpDialTimeout bounds the connect itself; the handshake is bounded by ctx.
const qmpDialTimeout = 5 * time.Second

// monitor is one QMP session. It hides go-qemu behind execute so that fork
// (migrate, query-migrate, blockdev-snapshot-sync) is one line per command.
// go-qemu's calls take no context, so each runs in a goroutine and a
// cancelled ctx closes the connection under it.
type monitor struct {
	path string
	mon  *qmp.SocketMonitor
}

// dialMonitor connects to a QMP socket and completes the qmp_capabilities
// handshake.
func dialMonitor(ctx context.Context, path string) (*monitor, error) {
	mon, err := qmp.NewSocketMonitor("unix", path, qmpDialTimeout)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w: %w", path, errdefs.ErrUnavailable, err)
	}
	done := make(chan error, 1)
	go func() { done <- mon.Connect() }()
	select {
	case err := <-done:
		if err != nil {
			_ = mon.Disconnect()
			return nil, fmt.Errorf("qmp %s handshake: %w: %w", path, errdefs.ErrUnavailable, err)
		}
		return &monitor{path: path, mon: mon}, nil
	case <-ctx.Done():
		// Disconnect must not race Connect (it reads fields Connect sets):
		// leave the handshake to finish or fail, then close.
		go func() {
			<-done
			_ = mon.Disconnect()
		}()
		return nil, fmt.Errorf("qmp %s handshake: %w", path, ctx.Err())
	}
}

// execute runs command with args (nil for none) and decodes its "return" into
// result (nil to ignore it).
func (m *monitor) execute(ctx context.Context, command string, args, result any) error {
	raw, err := json.Marshal(qmp.Command{Execute: command, Args: args})
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	type reply struct {
		out []byte
		err error
	}
	done := make(chan reply, 1)
	go func() {
		out, err := m.mon.Run(raw)
		done <- reply{out, err}
	}()
	var r reply
	select {
	case r = <-done:
	case <-ctx.Done():
		_ = m.mon.Disconnect() // unblocks Run; the session is unusable afterwards
		<-done
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
	if r.err != nil {
		return fmt.Errorf("qmp %s: %w", command, r.err)
	}
	if result == nil {
		return nil
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.out, &resp); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", command, err)
	}
	if err := json.Unmarshal(resp.Return, result); err != nil {
		return fmt.Errorf("qmp %s: decode return: %w", command, err)
	}
	return nil
}

func (m *monitor) close() error { return m.mon.Disconnect() }

// qmpStatus is the reply of query-status.
type qmpStatus struct {
	Running bool   `json:"running"`
	Status  string `json:"status"` // "running", "paused", "inmigrate", "postmigrate", …
}

// withMonitor runs fn on a fresh QMP session to the VM at path, one session
// at a time per VM: QEMU serves a single QMP client per socket.
func (d *Driver) withMonitor(ctx context.Context, path string, fn func(*monitor) error) error {
	unlock, err := d.lockQMP(ctx, path)
	if err != nil {
		return err
	}
	defer unlock()
	m, err := dialMonitor(ctx, path)
	if err != nil {
		return err
	}
	defer m.close()
	return fn(m)
}

// lockQMP takes the per-socket session lock, giving up when ctx ends.
func (d *Driver) lockQMP(ctx context.Context, path string) (func(), error) {
	v, _ := d.qmpLocks.LoadOrStore(path, make(chan struct{}, 1))
	sem := v.(chan struct{})
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("qmp %s: waiting for the monitor: %w", path, ctx.Err())
	}
}

// forgetQMP drops the lock of a destroyed VM.
func (d *Driver) forgetQMP(path string) { d.qmpLocks.Delete(path) }
