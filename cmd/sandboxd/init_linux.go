package main

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runInit is sandboxd as PID 1: it prepares the machine, runs the agent as
// a child (restarting it if it dies) and reaps every orphan. The agent is a
// separate process so that this reaper's wait4(-1) never steals the exit
// status of an exec the agent is waiting for. It never returns.
func runInit() {
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	os.Setenv("HOME", "/root")
	// Go's default action for SIGTERM/SIGINT/SIGHUP is to exit, and PID 1
	// exiting panics the kernel. Notify (not Ignore, which children would
	// inherit) keeps them harmless.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)

	mountAll(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	console, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		console = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(console, nil)).With("component", "init")
	go func() {
		for sig := range sigs {
			log.Info("signal ignored by init", "signal", sig)
		}
	}()
	if err := loopbackUp(); err != nil {
		log.Warn("bring up lo", "err", err)
	}

	watched := map[int]string{} // children whose end is worth a log line
	if pid, ok := growRootFS(log, console); ok {
		watched[pid] = "resize2fs"
	}
	agentPid, started := startAgent(log, console)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil: // ECHILD: no children, so no agent either
			log.Error("wait4", "err", err)
		case pid == agentPid:
			log.Error("agent exited; restarting", "pid", pid, "status", exitStatus(ws))
		default:
			if name, ok := watched[pid]; ok {
				delete(watched, pid)
				log.Info("child finished", "name", name, "status", exitStatus(ws))
			}
			continue
		}
		if time.Since(started) < time.Second {
			time.Sleep(time.Second) // no restart storm if it dies at once
		}
		agentPid, started = startAgent(log, console)
	}
}

func exitStatus(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// startAgent re-executes this binary with --agent, logging to the console.
func startAgent(log *slog.Logger, console *os.File) (int, time.Time) {
	now := time.Now()
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	devnull, _ := os.Open(os.DevNull)
	if devnull != nil {
		defer devnull.Close()
	}
	proc, err := os.StartProcess(self, []string{"sandboxd", "--agent"}, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{devnull, console, console},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		log.Error("start agent", "err", err)
		return -1, now
	}
	log.Info("agent started", "pid", proc.Pid, "version", version)
	proc.Release() // reaped by the wait4(-1) loop, not by os.Process
	return proc.Pid, now
}

type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

var mounts = []mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666"},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
}

// mountAll mounts the API file systems, skipping those the initramfs
// already moved into place (mounting devtmpfs twice would stack, not fail).
func mountAll(log *slog.Logger) {
	for _, m := range mounts {
		if isMountPoint(m.target) {
			continue
		}
		os.MkdirAll(m.target, 0o755)
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			log.Warn("mount", "target", m.target, "type", m.fstype, "err", err)
		}
	}
	// Tools such as resize2fs and df look for /etc/mtab.
	if _, err := os.Lstat("/etc/mtab"); errors.Is(err, os.ErrNotExist) {
		os.Symlink("/proc/self/mounts", "/etc/mtab")
	}
}

func isMountPoint(target string) bool {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[1] == target {
			return true
		}
	}
	return false
}

// loopbackUp sets IFF_UP on lo with an ioctl: no dependency on ip(8).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// growRootFS starts an online resize2fs when the disk (grown by the host,
// e.g. a template's 2 GiB image for an 8 GiB sandbox) is bigger than the
// root file system. It returns the child's pid for the reaper to log.
func growRootFS(log *slog.Logger, console *os.File) (int, bool) {
	const disk = "/dev/vda"
	argv := resizeCommand()
	if argv == nil {
		return 0, false
	}
	b, err := os.ReadFile("/sys/block/vda/size")
	if err != nil {
		return 0, false
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return 0, false
	}
	diskBytes, fsBytes := sectors*512, int64(st.Blocks)*st.Bsize
	// statfs leaves out the file system's own metadata; only a clear gap
	// means the disk was grown.
	if diskBytes-fsBytes < max(64<<20, diskBytes/20) {
		return 0, false
	}
	proc, err := os.StartProcess(argv[0], append(argv, disk), &os.ProcAttr{Files: []*os.File{nil, console, console}})
	if err != nil {
		log.Warn("start resize2fs", "err", err)
		return 0, false
	}
	log.Info("growing root file system", "disk_bytes", diskBytes, "fs_bytes", fsBytes, "pid", proc.Pid)
	proc.Release()
	return proc.Pid, true
}

// resizeCommand is how to run resize2fs: the one zeish installs beside an
// image's own files (run through its own loader and libraries, so the
// image's libc is never needed nor replaced), else the base image's.
func resizeCommand() []string {
	const dir = "/.zeish"
	if loaders, _ := filepath.Glob(dir + "/lib/ld-linux*.so*"); len(loaders) > 0 {
		if _, err := os.Stat(dir + "/resize2fs"); err == nil {
			return []string{loaders[0], "--library-path", dir + "/lib", dir + "/resize2fs"}
		}
	}
	if _, err := os.Stat("/sbin/resize2fs"); err == nil {
		return []string{"/sbin/resize2fs"}
	}
	return nil
}
