//go:build linux

package guest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/zeish/zeish/errdefs"
	"golang.org/x/sys/unix"
)

// system is what Configure changes in the machine; tests replace it so they
// never touch the host's clock or hostname.
type system struct {
	setTime     func(time.Time) error
	addEntropy  func([]byte) error
	setHostname func(string) error
	setNetwork  func(Network) error
}

func realSystem() system {
	nc := &netconf{}
	return system{setTime: setClock, addEntropy: reseedRNG, setHostname: setHostname, setNetwork: nc.set}
}

// configure is idempotent: it runs after every boot, fork and restore.
func (s *Server) configure(cfg Config) error {
	s.mu.Lock()
	s.env = maps.Clone(cfg.Env)
	if cfg.Desktop != nil && s.env["DISPLAY"] == "" {
		// Programs an exec starts show on the desktop.
		if s.env == nil {
			s.env = map[string]string{}
		}
		s.env["DISPLAY"] = cfg.Desktop.WithDefaults().Display
	}
	s.user, s.cwd = cfg.User, cfg.Cwd
	s.mu.Unlock()
	var errs []error
	if err := s.setGitAuth(cfg.Git); err != nil {
		errs = append(errs, fmt.Errorf("git credential: %w", err))
	}
	if !cfg.Time.IsZero() {
		if err := s.sys.setTime(cfg.Time); err != nil {
			errs = append(errs, fmt.Errorf("set clock: %w", err))
		}
	}
	if len(cfg.Entropy) > 0 {
		if err := s.sys.addEntropy(cfg.Entropy); err != nil {
			errs = append(errs, fmt.Errorf("reseed rng: %w", err))
		}
	}
	if cfg.Hostname != "" {
		if err := s.sys.setHostname(cfg.Hostname); err != nil {
			errs = append(errs, fmt.Errorf("set hostname: %w", err))
		}
	}
	if cfg.Network != nil {
		if err := s.sys.setNetwork(*cfg.Network); err != nil {
			errs = append(errs, fmt.Errorf("set network: %w", err))
		}
	}
	if len(cfg.StartCmd) > 0 {
		// A start command that cannot start (not in this image, say) must
		// not make the sandbox unusable: it is logged, here and in
		// /run/zeish/start.log.
		if err := s.startOnce(cfg.StartCmd); err != nil {
			s.log.Warn("start command", "err", err)
			if f, ferr := os.OpenFile(filepath.Join(startDir, "start.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
				fmt.Fprintf(f, "zeish: start command failed: %v\n", err)
				f.Close()
			}
		}
	}
	// Last: the desktop's programs start on the machine configured above,
	// and its error keeps its class (a template without Xvfb is the
	// caller's mistake, not the agent's).
	if err := s.configureDesktop(cfg.Desktop); err != nil {
		if len(errs) == 0 {
			return fmt.Errorf("configure: %w", err)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("configure: %v: %w", err, errdefs.ErrInternal)
	}
	s.log.Info("configured", "hostname", cfg.Hostname, "env_vars", len(cfg.Env), "network", cfg.Network != nil, "desktop", cfg.Desktop != nil)
	return nil
}

func setClock(t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	return unix.Settimeofday(&tv)
}

// reseedRNG credits the host's bytes to the kernel pool (RNDADDENTROPY) and
// forces the CRNG to reseed from it now (RNDRESEEDCRNG), so a clone stops
// producing the same random numbers as its parent and siblings.
func reseedRNG(entropy []byte) error {
	fd, err := unix.Open("/dev/urandom", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+(len(entropy)+3)/4*4)
	binary.NativeEndian.PutUint32(buf[0:], uint32(len(entropy)*8))
	binary.NativeEndian.PutUint32(buf[4:], uint32(len(entropy)))
	copy(buf[8:], entropy)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		// Still mix the bytes in, uncredited.
		unix.Write(fd, entropy)
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	// ENODATA: the CRNG is not initialised yet (early boot under TCG has
	// little entropy). It then seeds itself from the pool we just credited
	// as soon as that holds 256 bits, so send at least 32 bytes.
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDRESEEDCRNG, 0); errno != 0 && errno != unix.ENODATA {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

func setHostname(name string) error {
	if err := unix.Sethostname([]byte(name)); err != nil {
		return err
	}
	if err := os.WriteFile("/etc/hostname", []byte(name+"\n"), 0o644); err != nil {
		return err
	}
	// 127.0.1.1 is the Debian convention for the machine's own name.
	old, err := os.ReadFile("/etc/hosts")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(old), "\n"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "127.0.1.1" {
			continue
		}
		if line != "" || len(out) > 0 {
			out = append(out, line)
		}
	}
	if !strings.Contains(string(old), "localhost") {
		out = append([]string{"127.0.0.1\tlocalhost"}, out...)
	}
	out = append(out, "127.0.1.1\t"+name)
	return os.WriteFile("/etc/hosts", []byte(strings.Join(out, "\n")+"\n"), 0o644)
}

// netconf configures the guest's network card; it keeps its rtnetlink
// socket open between calls. A fork child inherits it with the rest of
// its parent's memory and kernel: opening and binding a netlink socket is
// kernel code that, run for the first time in the child's QEMU, costs
// milliseconds of translation under TCG.
type netconf struct {
	mu sync.Mutex
	r  *rtnl
}

// set gives the interface its MAC, turns its IPv6 off and brings it up if
// it is down (ioctl and sysctl), sets its address and default route
// (rtnetlink, netconf.go), and writes resolv.conf. A fork child's card is
// already up with IPv6 off, as its parent left it: it changes the MAC,
// the address and route, and resolv.conf.
func (c *netconf) set(n Network) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r == nil {
		r, err := openRtnl()
		if err != nil {
			return err
		}
		c.r = r
	}
	err := setNetwork(c.r, n)
	if err != nil {
		// A socket that saw an error may hold answers nobody read.
		c.r.Close()
		c.r = nil
	}
	return err
}

// close closes the socket, for tests (sandboxd keeps it until it exits).
func (c *netconf) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r != nil {
		c.r.Close()
		c.r = nil
	}
}

func setNetwork(r *rtnl, n Network) error {
	dev := n.Interface
	if dev == "" {
		dev = "eth0"
	}
	// The interface ioctls work on any socket: one socket for all of it.
	if n.MAC != "" {
		if err := changeMAC(r.fd, dev, n.MAC); err != nil {
			return err
		}
	}
	if err := bringUp(r.fd, dev); err != nil {
		return err
	}
	if n.Address != "" || n.Gateway != "" {
		index, err := linkIndex(r.fd, dev)
		if err != nil {
			return err
		}
		if err := readdress(r, index, dev, n.Address, n.Gateway); err != nil {
			return err
		}
	}
	if len(n.DNS) > 0 {
		if err := writeResolvConf(n.DNS); err != nil {
			return fmt.Errorf("resolv.conf: %w", err)
		}
	}
	return nil
}

// writeResolvConf makes /etc/resolv.conf name servers (resolvconf.go).
func writeResolvConf(servers []string) error {
	return updateResolvConf("/etc/resolv.conf", servers)
}

func (s *Server) info() (Info, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return Info{}, fmt.Errorf("uname: %v: %w", err, errdefs.ErrInternal)
	}
	info := Info{KernelRelease: unix.ByteSliceToString(uts.Release[:]), AgentVersion: s.version}
	info.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		info.BootID = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			info.UptimeSeconds, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return info, nil
}

func processes() ([]Process, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list processes: %v: %w", err, errdefs.ErrInternal)
	}
	var out []Process
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid …"; comm may hold spaces and parentheses.
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		p := Process{PID: pid, Command: string(stat[open+1 : end]), Argv: []string{}} // kernel threads have none
		if f := strings.Fields(string(stat[end+1:])); len(f) > 1 {
			p.PPID, _ = strconv.Atoi(f[1])
		}
		if cmdline, err := os.ReadFile(dir + "/cmdline"); err == nil && len(cmdline) > 0 {
			p.Argv = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	return out, nil
}

// parseSignal accepts "KILL", "SIGKILL", "kill" or a number.
func parseSignal(name string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	upper := strings.ToUpper(name)
	if !strings.HasPrefix(upper, "SIG") {
		upper = "SIG" + upper
	}
	if sig := unix.SignalNum(upper); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("kill: unknown signal %q: %w", name, errdefs.ErrInvalidArgument)
}

func (s *Server) kill(pid int, signal string, group bool) error {
	if pid <= 0 {
		return fmt.Errorf("kill: bad pid %d: %w", pid, errdefs.ErrInvalidArgument)
	}
	if signal == "" {
		signal = "TERM"
	}
	sig, err := parseSignal(signal)
	if err != nil {
		return err
	}
	if group {
		s.mu.Lock()
		proc := s.execs[pid]
		s.mu.Unlock()
		if proc == nil {
			return fmt.Errorf("kill: no running exec with pid %d: %w", pid, errdefs.ErrNotFound)
		}
		proc.killGroup(sig)
		return nil
	}
	if err := unix.Kill(pid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %d: no such process: %w", pid, errdefs.ErrNotFound)
		}
		return fmt.Errorf("kill %d: %v: %w", pid, err, errdefs.ErrInternal)
	}
	return nil
}
