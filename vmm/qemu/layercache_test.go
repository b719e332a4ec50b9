package qemu

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/vmm"
)

// TestOverlayBackingKeepsPageCache checks how a new overlay names its
// backing layer: with drop-cache off by default (so that a migration's
// disk handover does not drop and re-read every layer inside a live
// capture's pause), by plain path when asked; and that QEMU reads the
// layer's data through the overlay either way.
func TestOverlayBackingKeepsPageCache(t *testing.T) {
	for _, bin := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(bin); err != nil {
			testskip.Skip(t, "%s not installed: %v", bin, err)
		}
	}
	for _, tc := range []struct {
		name      string
		dropCache bool
		want      func(base string) string
	}{
		{"default", false, func(base string) string {
			return `json:{"file":{"driver":"file","drop-cache":false,"filename":"` + base + `"}}`
		}},
		{"drop-cache on", true, func(base string) string { return base }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base, top := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "top.qcow2")
			run(t, "qemu-img", "create", "-q", "-f", "qcow2", base, "64M")
			run(t, "qemu-io", "-c", "write -P 0xab 0 64k", base)
			d := &Driver{qemuImgPath: "qemu-img", dropLayerCache: tc.dropCache}
			var undo rollback.Stack
			if err := d.createOverlay(context.Background(), &undo, vmm.Spec{BaseDisk: base, Disk: top, DiskMiB: 64}); err != nil {
				t.Fatalf("createOverlay: %v", err)
			}
			var info struct {
				Backing string `json:"backing-filename"`
			}
			if err := json.Unmarshal([]byte(run(t, "qemu-img", "info", "--output=json", top)), &info); err != nil {
				t.Fatal(err)
			}
			if want := tc.want(base); info.Backing != want {
				t.Errorf("backing file %q, want %q", info.Backing, want)
			}
			if out := run(t, "qemu-io", "-r", "-c", "read -P 0xab 0 64k", top); !strings.Contains(out, "read 65536/65536") {
				t.Errorf("reading the layer through the overlay: %s", out)
			}
		})
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return string(out)
}
