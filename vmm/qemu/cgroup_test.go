package qemu

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/vmm"
)

// Cgroup limits fail closed: a VM whose limits cannot be set is refused
// (its start fails and rolls back), and a host without the controllers is
// refused up front, unless ZEISH_CGROUPS=optional, which logs and goes on.
func TestCgroupLimitsFailClosed(t *testing.T) {
	spec := vmm.Spec{ID: "sbx_1", MemoryMiB: 256, VCPUs: 1}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	v1 := func(t *testing.T) map[string]string {
		m := map[string]string{}
		for _, ctl := range []string{"memory", "cpu", "pids"} {
			m[ctl] = filepath.Join(t.TempDir(), ctl)
			os.MkdirAll(filepath.Join(m[ctl], cgroupName), 0o755)
		}
		return m
	}

	t.Run("limits set", func(t *testing.T) {
		c := &confinement{cgroups: cgroupLayout{v1: v1(t)}}
		if err := c.join("sbx_1.vm-1", 42, spec, quiet); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(c.cgroups.v1["memory"], cgroupName, "sbx_1.vm-1", "memory.limit_in_bytes"))
		if err != nil || strings.TrimSpace(string(b)) != "805306368" {
			t.Fatalf("memory limit: %q %v", b, err)
		}
	})
	for _, optional := range []bool{false, true} {
		name := map[bool]string{false: "required", true: "optional"}[optional]
		t.Run("a limit fails, "+name, func(t *testing.T) {
			layout := cgroupLayout{v1: v1(t)}
			// The pids hierarchy cannot hold our cgroup (a file where its
			// folder should be), as when a controller is not delegated.
			blocked := filepath.Join(layout.v1["pids"], cgroupName)
			os.RemoveAll(blocked)
			os.WriteFile(blocked, nil, 0o600)
			c := &confinement{cgroups: layout, cgroupsOptional: optional}
			err := c.join("sbx_1.vm-1", 42, spec, quiet)
			if optional && err != nil {
				t.Fatalf("optional: %v", err)
			}
			if !optional && (err == nil || !strings.Contains(err.Error(), "ZEISH_CGROUPS=optional")) {
				t.Fatalf("required: a VM without its pids limit was let run: %v", err)
			}
		})
	}
	t.Run("controllers missing", func(t *testing.T) {
		l := cgroupLayout{v1: map[string]string{"cpu": "/sys/fs/cgroup/cpu"}}
		if got := strings.Join(l.missing(), ","); got != "memory,pids" {
			t.Fatalf("missing %q", got)
		}
		if got := (cgroupLayout{v2: "/sys/fs/cgroup"}).missing(); len(got) != 0 {
			t.Fatalf("v2 missing %q", got)
		}
	})
}

// TestCgroupIDsAreNotReused: every VMM of a sandbox gets a cgroup of its
// own, live captures' receivers (always "rcv" in their image's folder)
// included; SettleCapture names the same cgroup from the same folder.
func TestCgroupIDsAreNotReused(t *testing.T) {
	src := &vmm.Handle{Spec: vmm.Spec{ID: "sbx_1", Dir: "/data/sandboxes/sbx_1/vm-2"}}
	seen := map[string]string{cgroupID(src): "the source"}
	for _, img := range []string{"/data/images/img_a", "/data/images/img_b", "/data/images/img_c"} {
		rh := receiverHandle(src, img)
		id := cgroupID(rh)
		if other, ok := seen[id]; ok {
			t.Errorf("the receiver in %s has %s's cgroup %s", img, other, id)
		}
		seen[id] = "the receiver in " + img
		if again := cgroupID(receiverHandle(src, img)); again != id {
			t.Errorf("the receiver in %s: %s, then %s", img, id, again)
		}
	}
	if got := cgroupID(&vmm.Handle{Spec: vmm.Spec{ID: "sbx_1", Dir: "/data/sandboxes/sbx_1/vm-3"}}); got != "sbx_1.vm-3" {
		t.Errorf("a sandbox VM's cgroup: %s", got)
	}
}
