package vmmtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/vmm"
)

// testConfined checks what a driver that declares confinement promises: its
// VMM does not run as root, sees only its own folder as its root, and runs
// in a cgroup of its own, and its RAM file is the VM user's alone.
func testConfined(t *testing.T, d vmm.Driver, spec vmm.Spec, unconfined bool) {
	if d.Capabilities().Confinement == "" && unconfined {
		t.Log("driver confines nothing by design: nothing to check")
		return
	}
	if d.Capabilities().Confinement == "" {
		testskip.Skip(t, "driver declares no confinement")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer destroy(t, d, h)
	if !h.Confined {
		t.Fatal("handle of a confining driver says unconfined")
	}
	proc := "/proc/" + strconv.Itoa(h.PID)
	status, _ := os.ReadFile(proc + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == "0" {
			t.Errorf("VMM runs as root: %s", line)
		}
	}
	root, err := os.Readlink(proc + "/root")
	if want, _ := filepath.EvalSymlinks(spec.Dir); err != nil || root != want {
		t.Errorf("VMM root is %q (%v), want its own folder %q", root, err, want)
	}
	// Its RAM is its own: the VM user's, and no one else's to read.
	requirePrivate(t, "RAM file", h.MemFile, processUID(t, h.PID))
	cg, _ := os.ReadFile(proc + "/cgroup")
	t.Logf("VMM root %s; cgroups:\n%s", root, cg)
	if !strings.Contains(string(cg), spec.ID) {
		t.Errorf("VMM is in no cgroup of its own:\n%s", cg)
	}
}
