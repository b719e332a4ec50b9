// Package vmmtest is the conformance suite every vmm.Driver runs. It starts
// real VMs, one at a time, and checks the contract of vmm.Driver: lifecycle,
// pid-reuse safety, all-or-nothing Start (bad specs, cancelled contexts) and a
// Destroy that leaves no process and no file behind. Linux only (/proc).
package vmmtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/vmm"
)

// shmDir is where the driver under test keeps guest RAM files; checked for
// leftovers. Run sets it (option ShmDir).
var shmDir = "/dev/shm"

// options adjust the suite to a driver.
type options struct {
	shmDir     string
	unconfined bool
}

// An Option adjusts the suite to a driver.
type Option func(*options)

// ShmDir is where the driver keeps guest RAM files (default /dev/shm).
func ShmDir(dir string) Option { return func(o *options) { o.shmDir = dir } }

// Unconfined says the driver confines nothing by design (an in-process
// fake has no VMM to confine): Confined then has nothing to check. Without
// it a driver that declares no confinement skips Confined, which fails
// under CI.
func Unconfined() Option { return func(o *options) { o.unconfined = true } }

// startTimeout bounds one Start in the suite (TCG on a busy host is slow).
const startTimeout = 90 * time.Second

// Run runs the suite. newSpec must return a bootable spec with a unique ID and
// a fresh, empty Dir (t.TempDir) on every call; the guest need not do
// anything but boot.
func Run(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec, opts ...Option) {
	o := options{shmDir: "/dev/shm"}
	for _, opt := range opts {
		opt(&o)
	}
	shmDir = o.shmDir
	t.Cleanup(func() { shmDir = "/dev/shm" })
	t.Run("Capabilities", func(t *testing.T) { testCapabilities(t, d) })
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, d, newSpec(t)) })
	t.Run("DestroyDeadVM", func(t *testing.T) { testDestroyDeadVM(t, d, newSpec(t)) })
	t.Run("DestroyWithEndedContext", func(t *testing.T) { testDestroyEndedContext(t, d, newSpec(t)) })
	t.Run("BadSpec", func(t *testing.T) { testBadSpec(t, d, newSpec) })
	t.Run("CancelledStart", func(t *testing.T) { testCancelledStart(t, d, newSpec) })
	t.Run("CaptureAndClones", func(t *testing.T) { testCaptureAndClones(t, d, newSpec) })
	t.Run("CaptureLive", func(t *testing.T) { testCaptureLive(t, d, newSpec) })
	t.Run("Adopt", func(t *testing.T) { testAdopt(t, d, newSpec) })
	t.Run("MergedLayers", func(t *testing.T) { testMergedLayers(t, d, newSpec) })
	t.Run("Confined", func(t *testing.T) { testConfined(t, d, newSpec(t), o.unconfined) })
}

func testCapabilities(t *testing.T, d vmm.Driver) {
	c := d.Capabilities()
	if c.Name == "" {
		t.Error("Capabilities().Name is empty")
	}
	if c.Accel != vmm.AccelKVM && c.Accel != vmm.AccelTCG {
		t.Errorf("Capabilities().Accel = %q, want kvm or tcg", c.Accel)
	}
}

// start starts spec and registers a Destroy for the end of the test.
func start(t *testing.T, d vmm.Driver, spec vmm.Spec) *vmm.Handle {
	t.Helper()
	requireEmptyDir(t, spec.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	began := time.Now()
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start returned after %v (pid %d, accel %s)", time.Since(began).Round(time.Millisecond), h.PID, h.Accel)
	t.Cleanup(func() { destroy(t, d, h) })
	return h
}

func destroy(t *testing.T, d vmm.Driver, h *vmm.Handle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Destroy(ctx, h); err != nil {
		t.Errorf("Destroy: %v", err)
	}
}

func testLifecycle(t *testing.T, d vmm.Driver, spec vmm.Spec) {
	h := start(t, d, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if !d.Alive(h) {
		t.Fatal("Alive = false right after Start")
	}
	if h.Spec.ID != spec.ID {
		t.Errorf("Handle.Spec.ID = %q, want %q", h.Spec.ID, spec.ID)
	}
	reused := *h
	reused.PID = os.Getpid() // a live process that is not this VM
	if d.Alive(&reused) {
		t.Error("Alive = true for a handle whose pid belongs to another process")
	}
	requireState(ctx, t, d, h, vmm.RunStateRunning)

	// Everything below uses the handle as a restarted zeishd would: decoded
	// from its persisted JSON, with no help from the driver's memory.
	h = roundTrip(t, h)

	conn, err := d.DialAgent(ctx, h)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	_ = conn.Close()

	if err := d.Pause(ctx, h); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	requireState(ctx, t, d, h, vmm.RunStatePaused)
	if err := d.Resume(ctx, h); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	requireState(ctx, t, d, h, vmm.RunStateRunning)

	if err := d.Destroy(ctx, h); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if d.Alive(h) {
		t.Error("Alive = true after Destroy")
	}
	requireNothingLeft(t, spec, h)
	if err := d.Destroy(ctx, h); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := d.Pause(ctx, h); err == nil {
		t.Error("Pause of a destroyed VM succeeded")
	}
	if _, err := d.State(ctx, h); err == nil {
		t.Error("State of a destroyed VM succeeded")
	}
	requireNothingLeft(t, spec, h)
}

func roundTrip(t *testing.T, h *vmm.Handle) *vmm.Handle {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var out vmm.Handle
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// testDestroyEndedContext destroys with a context that has already ended:
// the polite phase is skipped but the VM and its files must still go.
func testDestroyEndedContext(t *testing.T, d vmm.Driver, spec vmm.Spec) {
	h := start(t, d, spec)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if d.Alive(h) {
		t.Error("Alive = true after Destroy")
	}
	requireNothingLeft(t, spec, h)
}

func requireState(ctx context.Context, t *testing.T, d vmm.Driver, h *vmm.Handle, want vmm.RunState) {
	t.Helper()
	got, err := d.State(ctx, h)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if got != want {
		t.Fatalf("State = %q, want %q", got, want)
	}
}

// testDestroyDeadVM kills the VMM behind the driver's back: Alive must notice
// and Destroy must still succeed and clean up.
func testDestroyDeadVM(t *testing.T, d vmm.Driver, spec vmm.Spec) {
	h := start(t, d, spec)
	if err := syscall.Kill(h.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", h.PID, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Alive(h) {
		if time.Now().After(deadline) {
			t.Fatal("Alive = true 10s after SIGKILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Destroy(context.Background(), h); err != nil {
		t.Fatalf("Destroy of a dead VM: %v", err)
	}
	requireNothingLeft(t, spec, h)
}

func testBadSpec(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	cases := []struct {
		name   string
		mangle func(s *vmm.Spec)
	}{
		{"MissingKernel", func(s *vmm.Spec) { s.Kernel = filepath.Join(s.Dir, "no-such-kernel") }},
		{"MissingBaseDisk", func(s *vmm.Spec) { s.BaseDisk = filepath.Join(s.Dir, "no-such-disk.qcow2") }},
		{"ZeroMemory", func(s *vmm.Spec) { s.MemoryMiB = 0 }},
		{"MissingDir", func(s *vmm.Spec) { s.Dir = filepath.Join(s.Dir, "no-such-dir") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(t)
			tc.mangle(&spec)
			ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			h, err := d.Start(ctx, spec)
			if err == nil {
				t.Cleanup(func() { destroy(t, d, h) })
				t.Fatal("Start succeeded")
			}
			t.Logf("Start: %v", err)
			requireNothingLeft(t, spec, nil)
		})
	}
}

// testCancelledStart cancels Start's ctx at points spread over a launch. Each
// Start either fails with context.Canceled and leaves nothing, or (when the
// cancel came too late to matter) succeeds with a working VM.
func testCancelledStart(t *testing.T, d vmm.Driver, newSpec func(t *testing.T) vmm.Spec) {
	ms := time.Millisecond
	delays := []time.Duration{0, 5 * ms, 50 * ms, 100 * ms, 150 * ms, 200 * ms, 250 * ms, 400 * ms, 1000 * ms}
	for _, delay := range delays {
		t.Run(delay.String(), func(t *testing.T) {
			spec := newSpec(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if delay == 0 {
				cancel()
			} else {
				time.AfterFunc(delay, cancel)
			}
			h, err := d.Start(ctx, spec)
			if err == nil {
				if delay == 0 {
					t.Error("Start with a cancelled ctx succeeded")
				}
				t.Logf("cancel after %v came too late: Start succeeded", delay)
				if !d.Alive(h) {
					t.Error("Start succeeded but Alive = false")
				}
				destroy(t, d, h)
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("Start: %v, want an error wrapping context.Canceled", err)
			} else {
				t.Logf("Start: %v", err)
			}
			requireNothingLeft(t, spec, h)
		})
	}
}

// requireNothingLeft checks that no process mentions spec.Dir, spec.Dir is
// empty (the caller made it; it removes it) and no file of the VM is left in
// /dev/shm. h may be nil.
func requireNothingLeft(t *testing.T, spec vmm.Spec, h *vmm.Handle) {
	t.Helper()
	if pids := procscan.Mentioning(spec.Dir); len(pids) > 0 {
		t.Errorf("processes still running for %s: %v", spec.Dir, pids)
	}
	if h != nil && h.PID > 0 && slices.ContainsFunc(procscan.Args(h.PID), func(a string) bool { return strings.Contains(a, spec.ID) }) {
		t.Errorf("VMM pid %d still running", h.PID)
	}
	if entries, err := os.ReadDir(spec.Dir); err == nil {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) > 0 {
			t.Errorf("files left in %s: %v", spec.Dir, names)
		}
	}
	if entries, err := os.ReadDir(shmDir); err == nil {
		for _, e := range entries {
			if strings.Contains(e.Name(), spec.ID) {
				t.Errorf("file left in %s: %s", shmDir, e.Name())
			}
		}
	}
	if h != nil && h.MemFile != "" {
		if _, err := os.Stat(h.MemFile); err == nil {
			t.Errorf("memory file left: %s", h.MemFile)
		}
	}
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("newSpec: Dir: %v", err)
	}
	if len(entries) > 0 {
		t.Fatalf("newSpec: Dir %s is not empty", dir)
	}
}
