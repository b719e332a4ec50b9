package qemu

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/vmm"
	"github.com/zeish/zeish/vmm/vmmtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeTestImage()
	os.Exit(code)
}

// newTestDriver returns a driver, skipping the test where QEMU is missing
// (failing instead when CI is set).
func newTestDriver(t *testing.T) *Driver {
	t.Helper()
	testskip.Short(t, "starts VMs")
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img", "cpio"} {
		if _, err := exec.LookPath(bin); err != nil {
			testskip.Skip(t, "%s not installed: %v", bin, err)
		}
	}
	kernel, _, err := testKernel()
	if err != nil {
		testskip.Skip(t, "guest kernel: %v", err)
	}
	// As root, VMMs run confined, as zeishd runs them.
	// The accelerator is decided as zeishd decides it (ZEISH_ACCEL, else a
	// probe of the guest kernel, cached with the test fixtures).
	os.MkdirAll(testenv.CacheDir(), 0o755)
	d, err := New(Options{Confine: os.Geteuid() == 0, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		Accel: vmm.Accel(os.Getenv("ZEISH_ACCEL")), ProbeKernel: kernel, AccelCache: filepath.Join(testenv.CacheDir(), "accel.json")})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Background work logs through t and removes cgroups: let it finish
	// while the test may still log, and before the binary exits.
	t.Cleanup(func() {
		d.background.Wait()
		if d.confine != nil {
			d.confine.retrying.Wait()
		}
	})
	return d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newTestSpec returns a spec of the test image with a unique id and a fresh,
// short Dir (socket paths must fit in 108 bytes).
func newTestSpec(t *testing.T) vmm.Spec {
	t.Helper()
	img := testImageFor(t)
	dir, err := os.MkdirTemp("", "zvm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	id := "t" + randomHex(6)
	return vmm.Spec{
		ID:         id,
		Dir:        dir,
		Kernel:     img.Kernel,
		Initrd:     img.Initrd,
		KernelArgs: img.KernelArgs,
		BaseDisk:   img.BaseDisk,
		DiskMiB:    128,
		MemoryMiB:  256,
		VCPUs:      1,
		MAC:        "52:54:00:12:34:56",
	}
}

func TestConformance(t *testing.T) {
	d := newTestDriver(t)
	vmmtest.Run(t, d, newTestSpec)
}

// TestGuestBootsAndAgentEchoes boots the test image to /init, checks the
// virtio-serial agent channel end to end (the test init echoes) and logs the
// timings and QEMU's memory.
func TestGuestBootsAndAgentEchoes(t *testing.T) {
	d := newTestDriver(t)
	spec := newTestSpec(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	began := time.Now()
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	qmpReady := time.Since(began)

	// -daemonize (fork, setsid, fork): QEMU is not our child and is in a
	// session of its own, so it outlives zeishd and gets none of its signals.
	// QEMU runs under its seccomp filter (mode 2 in /proc/<pid>/status).
	if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.PID)); !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		t.Errorf("qemu pid %d runs without a seccomp filter:\n%s", h.PID, status)
	}

	_, ourSID := procStat(t, os.Getpid())
	if ppid, sid := procStat(t, h.PID); ppid == os.Getpid() || sid == ourSID {
		t.Errorf("qemu pid %d: ppid %d, sid %d; want neither our pid nor our session %d", h.PID, ppid, sid, ourSID)
	}

	for !strings.Contains(readFile(d.ConsoleLog(h)), initMarker) {
		if ctx.Err() != nil || !d.Alive(h) {
			t.Fatalf("guest never reached /init (alive=%v); console:\n%s", d.Alive(h), tail(readFile(d.ConsoleLog(h)), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	bootToInit := time.Since(began)

	conn, err := d.DialAgent(ctx, h)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	defer conn.Close()
	// The guest may open its end of the port a moment after the marker, and
	// bytes sent before that are dropped: send until the echo comes back.
	msg := "hello from the host\n"
	echoBegan := time.Now()
	reader := bufio.NewReader(conn)
	var got string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatalf("write agent: %v", err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		if got, err = reader.ReadString('\n'); err == nil {
			break
		}
	}
	if got != msg {
		t.Fatalf("agent echo = %q, %v; want %q", got, err, msg)
	}
	echo := time.Since(echoBegan)

	time.Sleep(2 * time.Second) // let the guest settle before measuring memory
	t.Logf("start→QMP ready %v, start→/init %v, agent echo %v, idle QEMU %s",
		qmpReady.Round(time.Millisecond), bootToInit.Round(time.Millisecond),
		echo.Round(time.Microsecond), memoryOf(h.PID))

	// Destroy leaves no cgroup behind (once init has reaped QEMU).
	if d.confine == nil {
		return
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, dir := range d.confine.cgroups.dirs(cgroupID(h)) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cgroup %s still there 30 s after Destroy", dir)
				break
			}
		}
	}
}

// TestStartFailsAfterLaunch makes QEMU itself fail during its setup (a kernel
// file that is not a kernel) and checks that QEMU's message reaches the error
// and the rollback leaves nothing behind.
func TestStartFailsAfterLaunch(t *testing.T) {
	d := newTestDriver(t)
	spec := newTestSpec(t)
	junk := filepath.Join(t.TempDir(), "junk-kernel")
	if err := os.WriteFile(junk, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Kernel = junk
	h, err := d.Start(context.Background(), spec)
	if err == nil {
		_ = d.Destroy(context.Background(), h)
		t.Fatal("Start with a junk kernel succeeded")
	}
	t.Logf("Start: %v", err)
	if !strings.Contains(err.Error(), "kernel") {
		t.Errorf("error does not carry QEMU's message about the kernel: %v", err)
	}
	entries, _ := os.ReadDir(spec.Dir)
	if len(entries) > 0 {
		t.Errorf("files left in %s: %v", spec.Dir, entries)
	}
	if pids := findTagged(identityOf(tagOf(spec.ID), filepath.Join(spec.Dir, qmpName))); len(pids) > 0 {
		t.Errorf("QEMU left running: %v", pids)
	}
	shm, _ := filepath.Glob(filepath.Join(d.shmDir, "zeish-"+spec.ID+"-*"))
	if len(shm) > 0 {
		t.Errorf("memory files left: %v", shm)
	}
}

// procStat returns the parent pid and session id of pid.
func procStat(t *testing.T, pid int) (ppid, sid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid pgrp session …
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ = strconv.Atoi(f[1])
	sid, _ = strconv.Atoi(f[3])
	return ppid, sid
}

// TestCancelAfterLaunch cancels Start once QEMU runs as a daemon: the
// rollback must kill it, not just the launcher.
func TestCancelAfterLaunch(t *testing.T) {
	d := newTestDriver(t)
	spec := newTestSpec(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pid int
	d.afterLaunch = func() {
		pid, _ = readPIDFile(filepath.Join(spec.Dir, pidName))
		cancel()
	}
	h, err := d.Start(ctx, spec)
	if err == nil {
		_ = d.Destroy(context.Background(), h)
		t.Fatal("Start succeeded after its ctx was cancelled")
	}
	t.Logf("Start: %v", err)
	if pid == 0 {
		t.Fatal("QEMU wrote no pidfile before the hook")
	}
	if procscan.Args(pid) != nil {
		t.Errorf("QEMU pid %d still running: %q", pid, procscan.Args(pid))
	}
	if entries, _ := os.ReadDir(spec.Dir); len(entries) > 0 {
		t.Errorf("files left in %s: %v", spec.Dir, entries)
	}
	if shm, _ := filepath.Glob(filepath.Join(d.shmDir, "zeish-"+spec.ID+"-*")); len(shm) > 0 {
		t.Errorf("memory files left: %v", shm)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// memoryOf summarises /proc/<pid>/status: resident memory, split into
// anonymous (QEMU's own) and shared (guest RAM file pages).
func memoryOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, k := range []string{"VmRSS:", "RssAnon:", "RssFile:", "RssShmem:"} {
			if strings.HasPrefix(line, k) {
				parts = append(parts, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return fmt.Sprint(parts)
}
