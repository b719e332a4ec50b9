//go:build linux

package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// startDir is per boot (/run is a tmpfs): its marker says the start command
// ran in this boot, and survives into forks of the running machine.
var startDir = "/run/zeish"

// startOnce starts argv in the background unless it was started in this
// boot already. It is not an exec: nothing waits for it, it is reaped by
// init, and it runs in a session of its own.
func (s *Server) startOnce(argv []string) error {
	if err := os.MkdirAll(startDir, 0o755); err != nil {
		return err
	}
	marker := filepath.Join(startDir, "started")
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	f.Close()
	cmd, err := s.command(ExecRequest{Argv: argv})
	if err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(startDir, "start.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Setsid = false, true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	s.log.Info("start command started", "argv0", argv[0], "pid", cmd.Process.Pid)
	go cmd.Wait() // the agent is not PID 1: reap it here
	return nil
}
