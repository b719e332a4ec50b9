package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zeish/zeish/internal/procscan"
)

// launchTimeout bounds QEMU's own setup (everything before it daemonizes),
// whatever ctx says: a launcher that hangs is killed.
const launchTimeout = 60 * time.Second

// launch runs QEMU with -daemonize and waits for the launcher to exit, which
// QEMU's parent does once the daemon has finished its setup. On failure the
// error carries QEMU's stderr. If ctx ends first the launcher's process group
// is killed; the daemon has left that group by then (setsid), so callers must
// also killTagged.
// files become QEMU's fds 3, 4, ….
func launch(ctx context.Context, qemuPath string, args []string, files ...*os.File) error {
	cmd := exec.Command(qemuPath, args...)
	cmd.ExtraFiles = files
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The daemon keeps our pipe until it redirects its stdio to /dev/null;
	// never wait on it for long if it dies or is killed before that.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", qemuPath, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(launchTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("qemu: %w: %s", err, tail(out.String(), 2048))
		}
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	case <-timer.C:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("qemu setup took longer than %s: %s", launchTimeout, tail(out.String(), 2048))
	}
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// readPIDFile returns the pid QEMU wrote.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pidfile %s: bad content %q", path, b)
	}
	return pid, nil
}

// identity is what tells our QEMU from any other process that might hold a
// reused pid: its -name and its QMP socket path, both unique to one VM.
type identity struct {
	name    string // value after -name
	chardev string // value of the QMP -chardev
}

func identityOf(tag, qmpSocket string) identity {
	return identity{name: nameArg(tag), chardev: qmpChardevArg(qmpSocket)}
}

func (id identity) matches(args []string) bool {
	var name, qmp bool
	for i := 1; i < len(args); i++ {
		switch {
		case args[i-1] == "-name" && args[i] == id.name:
			name = true
		case args[i-1] == "-chardev" && args[i] == id.chardev:
			qmp = true
		}
	}
	return name && qmp
}

// isOurs reports whether pid is a live process carrying id.
func isOurs(pid int, id identity) bool { return id.matches(procscan.Args(pid)) }

// findTagged lists live processes carrying id: the daemon, and during a
// launch also its parent. Used to leave nothing behind when the pidfile is
// not (yet) there.
func findTagged(id identity) []int {
	var pids []int
	for _, p := range procscan.All() {
		if id.matches(p.Args) {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// waitGone polls until no live process carries id at pid, or timeout.
func waitGone(pid int, id identity, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !isOurs(pid, id) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // short: a fork's pause waits on this
	}
}

// killTagged SIGKILLs every process carrying id and waits for them to go.
func killTagged(id identity, extra ...int) error {
	pids := append(findTagged(id), extra...)
	for _, pid := range pids {
		if isOurs(pid, id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var stuck []string
	for _, pid := range pids {
		if !waitGone(pid, id, 5*time.Second) {
			stuck = append(stuck, strconv.Itoa(pid))
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("qemu pid %s survived SIGKILL", strings.Join(stuck, ","))
	}
	return nil
}

// removeFiles removes paths, ignoring those already gone.
func removeFiles(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
