package template

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/testskip"
)

func sampleInputs() *inputs {
	return &inputs{
		KernelPath: "/boot/vmlinuz-x",
		Kernel:     []byte("kernel"),
		Release:    "6.1.0-1-cloud-amd64",
		Modules:    []hostFile{{GuestPath: "/lib/modules/virtio.ko", Data: []byte("virtio")}},
		Busybox:    []byte("busybox"),
		Sandboxd:   []byte("sandboxd"),
		Resize2fs: []hostFile{
			{GuestPath: "/sbin/resize2fs", Data: []byte("resize2fs")},
			{GuestPath: "/lib/x86_64-linux-gnu/libc.so.6", Data: []byte("libc")},
		},
	}
}

func TestHashCoversEveryInput(t *testing.T) {
	base := sampleInputs().hash()
	if again := sampleInputs().hash(); again != base {
		t.Fatalf("same inputs hash differently: %s vs %s", base, again)
	}
	tests := []struct {
		name   string
		mutate func(in *inputs)
		same   bool // a change that must not force a rebuild
	}{
		{"kernel bytes", func(in *inputs) { in.Kernel = []byte("kernel2") }, false},
		{"kernel release", func(in *inputs) { in.Release = "6.1.0-2-cloud-amd64" }, false},
		{"module bytes", func(in *inputs) { in.Modules[0].Data = []byte("virtio2") }, false},
		{"module added", func(in *inputs) {
			in.Modules = append(in.Modules, hostFile{GuestPath: "/lib/modules/virtio_net.ko", Data: []byte("n")})
		}, false},
		{"busybox bytes", func(in *inputs) { in.Busybox = append(in.Busybox, 0) }, false},
		{"sandboxd bytes", func(in *inputs) { in.Sandboxd = append(in.Sandboxd, 0) }, false},
		{"resize2fs library", func(in *inputs) { in.Resize2fs[1].Data = []byte("libc2") }, false},
		{"library guest path", func(in *inputs) { in.Resize2fs[1].GuestPath = "/lib64/libc.so.6" }, false},
		// Boundaries between fields must count: moving a byte across them
		// is a different input set.
		{"bytes moved between fields", func(in *inputs) {
			in.Busybox, in.Sandboxd = []byte("busyboxs"), []byte("andboxd")
		}, false},
		{"host path of the kernel", func(in *inputs) { in.KernelPath = "/elsewhere/vmlinuz" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInputs()
			tt.mutate(in)
			if got := in.hash() == base; got != tt.same {
				t.Errorf("hash unchanged = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007fb318f12000)
	libe2p.so.2 => /lib/x86_64-linux-gnu/libe2p.so.2 (0x00007fb318ee3000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fb318c8f000)
	/lib64/ld-linux-x86-64.so.2 (0x00007fb318f14000)
`
	got, err := parseLdd(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/lib/x86_64-linux-gnu/libe2p.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := parseLdd("\tlibfoo.so.1 => not found\n"); err == nil {
		t.Error("a missing library was not reported")
	}
}

func TestVersionLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"/boot/vmlinuz-6.1.0-9-cloud-amd64", "/boot/vmlinuz-6.1.0-10-cloud-amd64", true},
		{"/boot/vmlinuz-6.1.0-56-cloud-amd64", "/boot/vmlinuz-6.1.0-9-cloud-amd64", false},
		{"/boot/vmlinuz-5.10.0-30-cloud-amd64", "/boot/vmlinuz-6.1.0-1-cloud-amd64", true},
	}
	for _, tt := range tests {
		if got := versionLess(tt.a, tt.b); got != tt.want {
			t.Errorf("versionLess(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestModKey(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/drivers/char/hw_random/virtio-rng.ko": "virtio_rng",
		"virtio-rng":                     "virtio_rng",
		"kernel/net/core/failover.ko.xz": "failover",
	} {
		if got := modKey(in); got != want {
			t.Errorf("modKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// The release read from the bzImage header must match the file name of a
// Debian kernel; a file that is not a bzImage falls back to its name.
func TestKernelRelease(t *testing.T) {
	paths, _ := filepath.Glob("/boot/vmlinuz-*")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kernelRelease(b, "/x/not-a-vmlinuz-name")
		if err != nil || got != strings.TrimPrefix(filepath.Base(p), "vmlinuz-") {
			t.Errorf("%s: release %q, %v", p, got, err)
		}
	}
	if got, _ := kernelRelease([]byte("junk"), "/a/vmlinuz-9.9.9-x"); got != "9.9.9-x" {
		t.Errorf("fallback release = %q", got)
	}
	if _, err := kernelRelease([]byte("junk"), "/a/kernel"); err == nil {
		t.Error("no error for an unnamed non-bzImage")
	}
}

// The archive must be one the kernel's unpacker (and cpio) reads: device
// nodes, symlinks and files intact.
func TestCpioReadable(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		testskip.Skip(t, "cpio not installed")
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.Dir("dev", 0o755)
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, []byte("#!/bin/sh\n"))
	c.Symlink("sh", "busybox")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", buf.Len())
	}
	cmd := exec.Command("cpio", "-itv", "--quiet")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio: %v: %s", err, out)
	}
	for _, want := range []string{"crw-------", "5,   1", "dev/console", "-rwxr-xr-x", "10 ", "init", "sh -> busybox"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cpio listing lacks %q:\n%s", want, out)
		}
	}
}
