package template_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
)

const initMarker = "ZEISH-INIT-OK"

// TestBaseBoots builds the base template with a stand-in /sbin/init, boots it
// once under QEMU and checks that the initramfs reached the root disk: the
// stand-in prints the marker and `uname -r`, then powers off.
func TestBaseBoots(t *testing.T) {
	testskip.Short(t, "boots a VM")
	testenv.RequireQEMU(t)
	fakeInit := testenv.GoBuildStatic(t, "./template/testdata/fakeinit")

	start := time.Now()
	art := testenv.BaseTemplateWith(t, fakeInit)
	t.Logf("template ready in %v (cold build or cache hit)", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	again, err := template.BuildBase(context.Background(), template.BaseOptions{
		CacheDir: filepath.Dir(art.Dir), SandboxdPath: fakeInit})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache hit in %v", time.Since(start).Round(time.Millisecond))
	if again.Dir != art.Dir {
		t.Fatalf("second call built %s, want the cached %s", again.Dir, art.Dir)
	}
	for _, p := range []string{art.Initrd, art.BaseDisk} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f MiB", filepath.Base(p), float64(st.Size())/(1<<20))
	}

	console, took := bootToMarker(t, art)
	t.Logf("boot to marker: %v", took.Round(time.Millisecond))
	for _, line := range strings.Split(console, "\n") {
		if strings.Contains(line, initMarker) {
			t.Logf("guest: %s", strings.TrimSpace(line))
		}
	}
	for _, want := range []string{"pid=1 ", "release=" + art.KernelRelease + " ", "ports=agent ", "eth0"} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if strings.Contains(console, "zeish-init:") {
		t.Errorf("init complained")
	}
	if t.Failed() {
		t.Logf("console:\n%s", console)
	}
}

// bootToMarker boots art with an overlay disk and returns the console output
// once QEMU has exited, and the time from launch to the marker.
func bootToMarker(t *testing.T, art *template.Artifacts) (string, time.Duration) {
	t.Helper()
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", art.BaseDisk, "-F", "qcow2", overlay, "2G").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	logPath := filepath.Join(dir, "console.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-M", "q35", "-accel", "tcg", "-m", "256", "-nodefaults", "-no-user-config",
		"-display", "none", "-no-reboot", "-serial", "file:"+logPath,
		"-kernel", art.Kernel, "-initrd", art.Initrd, "-append", art.KernelArgs,
		"-drive", "file="+overlay+",if=virtio,format=qcow2",
		"-chardev", "null,id=agent", "-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=agent,name=agent",
		"-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0")
	var stderr strings.Builder
	qemu.Stderr = &stderr
	start := time.Now()
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- qemu.Wait() }()
	t.Cleanup(func() {
		qemu.Process.Kill() // no-op once it has exited
		<-exited
	})

	var markerAt time.Duration
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			b, _ := os.ReadFile(logPath)
			console := string(b)
			if err != nil {
				t.Fatalf("qemu: %v\nstderr: %s\nconsole:\n%s", err, stderr.String(), console)
			}
			if markerAt == 0 {
				if !strings.Contains(console, initMarker) {
					t.Fatalf("VM powered off without %s; console:\n%s", initMarker, console)
				}
				markerAt = time.Since(start)
			}
			return console, markerAt
		case <-tick.C:
			if markerAt == 0 {
				if b, _ := os.ReadFile(logPath); strings.Contains(string(b), initMarker) {
					markerAt = time.Since(start)
				}
			}
		case <-ctx.Done():
			b, _ := os.ReadFile(logPath)
			t.Fatalf("VM did not power off in time; console:\n%s", b)
		}
	}
}
